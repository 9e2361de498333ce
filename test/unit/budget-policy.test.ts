import { expect } from "chai";
import { evaluatePayment, hasFreshStepUp, utcDayStart, type Policy } from "../../core/budgets/policy.js";
import { canonicalJson } from "../../core/budgets/ids.js";

const policy = (o: Partial<Policy> = {}): Policy => ({
  status: "active",
  amountCapCentsPerTx: 1_000,
  amountCapCentsPerDay: 2_000,
  amountCapCentsLifetime: 5_000,
  stepUpAmountCents: 500,
  chainAllowlist: ["base"],
  timeWindowEnd: new Date("2030-01-01T00:00:00Z"),
  ...o,
});
const usage = { balanceCents: 10_000, spentTodayCents: 0, spentLifetimeCents: 0 };
const now = new Date("2029-06-01T12:00:00Z");

describe("evaluatePayment (pure policy evaluation)", () => {
  it("accepts within every limit, and at each limit exactly", () => {
    expect(evaluatePayment(policy(), usage, { amountCents: 100, chain: "base" }, now)).to.deep.equal({ decision: "accept" });
    expect(
      evaluatePayment(
        policy({ stepUpAmountCents: null }),
        { ...usage, spentTodayCents: 1_000, spentLifetimeCents: 4_000 },
        { amountCents: 1_000, chain: "base" },
        now,
      ),
    ).to.deep.equal({
      decision: "accept",
    });
    expect(evaluatePayment(policy(), usage, { amountCents: 500, chain: "base" }, now).decision).to.equal("accept");
  });

  it("names the deciding rule, in order", () => {
    const deny = (p: Policy | undefined, u: typeof usage, amountCents: number, chain = "base", at = now) => {
      const e = evaluatePayment(p, u, { amountCents, chain }, at);
      return e.decision === "accept" ? "accept" : e.rule;
    };
    expect(deny(undefined, usage, 1)).to.equal("policy_inactive");
    expect(deny(policy({ status: "draft" }), usage, 1)).to.equal("policy_inactive");
    expect(deny(policy(), usage, 1, "base", new Date("2030-01-01T00:00:00Z"))).to.equal("time_window_end");
    expect(deny(policy(), usage, 1, "eth")).to.equal("chain_allowlist");
    expect(deny(policy(), usage, 1_001)).to.equal("per_tx_cap");
    expect(deny(policy(), { ...usage, spentTodayCents: 1_500 }, 501)).to.equal("per_day_cap");
    expect(deny(policy(), { ...usage, spentLifetimeCents: 4_800 }, 201)).to.equal("lifetime_cap");
    expect(deny(policy(), { ...usage, balanceCents: 50 }, 51)).to.equal("balance");
    expect(deny(policy(), usage, 501)).to.equal("step_up_amount");
    // A zero cap refuses everything above zero; no time window means no end.
    expect(deny(policy({ amountCapCentsPerTx: 0 }), usage, 1)).to.equal("per_tx_cap");
    expect(deny(policy({ timeWindowEnd: null }), usage, 1, "base", new Date("2099-01-01T00:00:00Z"))).to.equal("accept");
  });

  it("an approved payment skips only the step-up rule", () => {
    expect(evaluatePayment(policy(), usage, { amountCents: 900, chain: "base" }, now, { stepUpApproved: true })).to.deep.equal({ decision: "accept" });
    expect(evaluatePayment(policy(), { ...usage, balanceCents: 800 }, { amountCents: 900, chain: "base" }, now, { stepUpApproved: true })).to.deep.equal({
      decision: "deny",
      rule: "balance",
    });
  });
});

describe("step-up freshness, UTC days, canonical params", () => {
  it("counts a step-up for 10 minutes", () => {
    const t = Math.floor(now.getTime() / 1000);
    expect(hasFreshStepUp(true, t - 600, now)).to.equal(true);
    expect(hasFreshStepUp(true, t - 601, now)).to.equal(false);
    expect(hasFreshStepUp(false, t, now)).to.equal(false);
    expect(hasFreshStepUp(true, 0, now)).to.equal(false);
  });

  it("starts days at 00:00Z", () => {
    expect(utcDayStart(new Date("2029-06-01T23:59:59.999Z")).toISOString()).to.equal("2029-06-01T00:00:00.000Z");
  });

  it("canonical JSON ignores key order", () => {
    expect(canonicalJson({ b: 1, a: [2, { d: null, c: "x" }] })).to.equal(canonicalJson({ a: [2, { c: "x", d: null }], b: 1 }));
  });
});
