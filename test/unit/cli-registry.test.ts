import { expect } from "chai";
import { COMMANDS, findCommand } from "../../cli/commands/registry.js";

describe("CLI command table", () => {
  it("names each command word once, so every subcommand is reachable", () => {
    const names = COMMANDS.map((c) => c.name);
    expect(
      names.filter((n, i) => names.indexOf(n) !== i),
      "command words listed twice",
    ).to.deep.equal([]);
    expect(
      findCommand("dev")!
        .subcommands.map((s) => s.name)
        .sort(),
    ).to.deep.equal(["chain", "outbox"]);
  });
});
