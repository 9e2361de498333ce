import { expect } from "chai";
import { Code, type ConnectError, createClient, createContextValues, type Interceptor } from "@connectrpc/connect";
import { Health, HealthCheckResponse_ServingStatus as Status } from "../../gen/grpc/health/v1/health_pb.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { createInProcessTransport } from "../../core/in-process-transport.js";
import { fail } from "../../core/errors.js";
import { kOperator, kRequestId } from "../../core/context.js";
import { createCoreInterceptors } from "../../core/interceptors.js";
import { createCapturedLogger } from "../support/logs.js";
import { expectInternalError, expectRefused } from "../support/refusals.js";

/** The gateway's in-process hop keeps Connect's client contract without serialization. */
describe("in-process transport", () => {
  const client = (check: (service: string, requestId: string) => unknown, interceptors: Interceptor[] = []) =>
    createClient(
      Health,
      createInProcessTransport((router) => {
        router.service(Health, { check: (req, ctx) => check(req.service, ctx.values.get(kRequestId)) as never });
      }, interceptors),
    );

  it("runs the interceptors and passes context values and headers to the handler", async () => {
    const setId: Interceptor = (next) => (req) => {
      req.contextValues.set(kRequestId, req.header.get("x-request-id") ?? "none");
      return next(req);
    };
    let seen = "";
    const handler = (_s: string, id: string) => {
      seen = id;
      return { status: Status.SERVING };
    };
    const res = await client(handler, [setId]).check({ service: "" }, { headers: { "x-request-id": "r-1" } });
    expect(res.status).to.equal(Status.SERVING);
    expect(seen).to.equal("r-1");
  });

  it("delivers a domain error with its detail", async () => {
    const refusal = await expectRefused(
      client(() => fail(Reason.RATE_LIMITED, "slow down", { retryAfterSeconds: 60 })).check({ service: "" }),
      Reason.RATE_LIMITED,
    );
    expect(refusal.detail.retryAfterSeconds).to.equal(60);
    expect(refusal.message).to.equal("slow down");
  });

  it("turns a bug into a bare internal error, keeping the cause out of the message", async () => {
    await expectInternalError(
      client(() => {
        throw new Error("password=hunter2 in a stack");
      }).check({ service: "" }),
    );
  });

  it("answers unimplemented for an unregistered service method", async () => {
    const transport = createInProcessTransport(() => {}, []);
    const err = (await createClient(Health, transport)
      .check({ service: "" })
      .catch((e: unknown) => e)) as ConnectError;
    expect(err.code).to.equal(Code.Unimplemented);
  });

  it("gives core fresh context values: nothing a caller passes reaches core's interceptors or handlers", async () => {
    const forged = createContextValues();
    forged.set(kOperator, true);
    let operator: boolean | undefined;
    const transport = createInProcessTransport((router) => {
      router.service(Health, {
        check: (_req, ctx) => {
          operator = ctx.values.get(kOperator);
          return { status: Status.SERVING };
        },
      });
    }, []);
    await createClient(Health, transport).check({ service: "" }, { contextValues: forged });
    expect(operator).to.equal(false);
  });

  describe("deadlines", () => {
    const interceptors = createCoreInterceptors({ logger: createCapturedLogger().logger, adminToken: undefined, gatewayToken: undefined });
    const counting = (extra: Interceptor[] = []) => {
      const seen = { runs: 0, signals: [] as AbortSignal[] };
      const transport = createInProcessTransport(
        (router) => {
          router.service(Health, {
            check: (_req, ctx) => {
              seen.runs++;
              seen.signals.push(ctx.signal);
              return { status: Status.SERVING };
            },
          });
        },
        [...extra, ...interceptors],
      );
      return { health: createClient(Health, transport), seen };
    };

    it("runs no handler for a call whose deadline passes before it would start: DeadlineExceeded", async () => {
      // An interceptor that takes longer than the caller's deadline, as a wait before the handler would.
      const slow: Interceptor = (next) => async (req) => {
        await new Promise((r) => setTimeout(r, 50));
        return next(req);
      };
      const { health, seen } = counting([slow]);
      const err = (await health.check({ service: "" }, { timeoutMs: 5 }).catch((e: unknown) => e)) as ConnectError;
      expect(Code[err.code]).to.equal("DeadlineExceeded");
      expect(seen.runs).to.equal(0);
    });

    it("treats a timeout of 0 or less as no deadline, as Connect's own transports do", async () => {
      const { health, seen } = counting();
      for (const timeoutMs of [0, -1]) expect((await health.check({ service: "" }, { timeoutMs })).status).to.equal(Status.SERVING);
      expect(seen.runs).to.equal(2);
    });

    it("makes no signal per call for a caller without signal or deadline (the gateways' calls)", async () => {
      const { health, seen } = counting();
      await health.check({ service: "" });
      await health.check({ service: "" });
      expect(seen.signals[0]!.aborted).to.equal(false);
      expect(seen.signals[0]).to.equal(seen.signals[1]);
    });

    it("hands a caller's own signal (a gateway's client that may leave) to the handler, and its abort", async () => {
      const { health, seen } = counting();
      const left = new AbortController();
      await health.check({ service: "" }, { signal: left.signal });
      left.abort(new Error("the client left"));
      expect(seen.signals[0]!.aborted).to.equal(true);
    });
  });

  describe("core's log of refusals of in-process calls", () => {
    const logs = createCapturedLogger();
    const interceptors = createCoreInterceptors({ logger: logs.logger, adminToken: undefined, gatewayToken: undefined });
    const refusedWith = async (reason: Reason) => {
      const before = logs.lines.length;
      await expectRefused(client(() => fail(reason, "no", {}, new Error(`cause of ${Reason[reason]}`)), interceptors).check({ service: "" }), reason);
      return logs.lines.slice(before).map((l) => JSON.parse(l) as Record<string, unknown>);
    };

    it("leaves a refusal of the caller to the gateway's request line", async () => {
      for (const reason of [Reason.INVALID_TOKEN, Reason.RATE_LIMITED, Reason.OVERLOADED, Reason.NOT_FOUND, Reason.POLICY_DENIED]) {
        expect(await refusedWith(reason), Reason[reason]).to.deep.equal([]);
      }
    });

    it("still logs a refusal that reports a failure on our side, with its cause (the gateway never gets it)", async () => {
      for (const reason of [Reason.AUDIT_UNAVAILABLE, Reason.SIGNING_UNAVAILABLE, Reason.PROVIDER_UNAVAILABLE, Reason.PROVISIONING_FAILED, Reason.INTERNAL]) {
        const lines = await refusedWith(reason);
        expect(lines, Reason[reason]).to.have.length(1);
        expect(lines[0]).to.include({ msg: "rpc failed on our side", reason: Reason[reason] });
        expect(JSON.stringify(lines[0])).to.include(`cause of ${Reason[reason]}`);
      }
    });
  });
});
