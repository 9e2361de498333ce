import { expect } from "chai";
import { startServiceProcess, tempDataDir, type ServiceProcess } from "../support/process.js";

/** `vaultgate serve` reads SIGNIN_FLOW_RATE_LIMIT_PER_MINUTE: the page past it is a 429 with Retry-After. */
describe("SIGNIN_FLOW_RATE_LIMIT_PER_MINUTE reaches the running service", function () {
  this.timeout(90_000);
  let dir: Awaited<ReturnType<typeof tempDataDir>>;
  let service: ServiceProcess;
  before(async () => {
    dir = await tempDataDir();
    // The database is the process's own embedded one, so no other suite's starts count.
    service = await startServiceProcess("all", {
      DATA_DIR: dir.path,
      DATABASE_URL: "",
      SIGNIN_METHODS: "email,passkey",
      // Passkeys need a domain name: browsers take no IP address as their relying party.
      APP_URL: "http://localhost",
      AUTH_URL: "http://localhost",
      SIGNIN_FLOW_RATE_LIMIT_PER_MINUTE: "2",
    });
  });
  after(async () => {
    await service?.stop();
    await dir?.remove();
  });

  it("lets two passkey sign-ins start in a minute from one address, and refuses the third", async () => {
    const statuses: number[] = [];
    let refused: Response | undefined;
    for (let i = 0; i < 3; i++) {
      const res = await fetch(`${service.gatewayUrl}/signin/passkey`, { redirect: "manual" });
      statuses.push(res.status);
      if (res.status === 429) refused = res;
      await res.arrayBuffer();
    }
    expect(statuses).to.deep.equal([200, 200, 429]);
    expect(Number(refused!.headers.get("retry-after"))).to.be.within(1, 60);
  });
});
