import { create, isMessage, type DescMessage, type MessageInitShape } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  createContextValues,
  createHandlerContext,
  createRouterTransport,
  createServiceImplSpec,
  type ConnectRouter,
  type Interceptor,
  type MethodImplSpec,
  type Transport,
  type UnaryRequest,
  type UnaryResponse,
} from "@connectrpc/connect";
import { createDeadlineSignal, createLinkedAbortController } from "@connectrpc/connect/protocol";
import { kInProcess } from "./context.js";
import { NEVER_ABORTED } from "./deadlines.js";

/**
 * Calls core's handlers directly, through the same interceptors, for a gateway in this process:
 * no HTTP framing or serialization (streaming uses the router transport). Calls are marked kInProcess.
 */
export function createInProcessTransport(routes: (router: ConnectRouter) => void, interceptors: Interceptor[]): Transport {
  const methods = collectMethods(routes);
  const streaming = createRouterTransport(routes, { router: { interceptors } });

  return {
    async unary<I extends DescMessage, O extends DescMessage>(
      method: UnaryRequest<I, O>["method"],
      signal: AbortSignal | undefined,
      timeoutMs: number | undefined,
      header: ConstructorParameters<typeof Headers>[0] | undefined,
      input: MessageInitShape<I>,
    ): Promise<UnaryResponse<I, O>> {
      // Fresh values, never the caller's: core's interceptors alone decide what they hold
      // (the operator flag, the vouched address), whatever object a caller passes.
      const contextValues = createContextValues();
      contextValues.set(kInProcess, true);
      const spec = methods.get(`${method.parent.typeName}/${method.name}`);
      if (spec?.kind !== "unary") throw new ConnectError(`${method.parent.typeName}/${method.name} is not implemented`, Code.Unimplemented);
      const impl = spec.impl as (req: unknown, ctx: ReturnType<typeof createHandlerContext>) => unknown;
      const url = `/${method.parent.typeName}/${method.name}`;

      // As Connect's own transports: a timeout of 0 or less is no deadline.
      const deadlineMs = timeoutMs !== undefined && timeoutMs > 0 ? timeoutMs : undefined;
      const deadlineAt = deadlineMs === undefined ? undefined : Date.now() + deadlineMs;
      const call = async (req: UnaryRequest<I, O>): Promise<UnaryResponse<I, O>> => {
        const init = {
          service: req.service,
          method: req.method,
          protocolName: "in-process",
          requestMethod: "POST",
          url,
          requestSignal: req.signal,
          requestHeader: req.header,
          contextValues: req.contextValues,
        };
        // req.signal already carries the deadline (linked below); the context only reports what is left of it.
        const ctx = deadlineAt === undefined ? lightContext(init) : { ...createHandlerContext(init), timeoutMs: () => deadlineAt - Date.now() };
        const out = (await impl(req.message, ctx)) as MessageInitShape<O>;
        const message = isMessage(out, method.output) ? out : create(method.output, out);
        return { stream: false, service: req.service, method: req.method, header: ctx.responseHeader, trailer: ctx.responseTrailer, message };
      };
      const chain = interceptors.reduceRight((next, interceptor) => interceptor(next as never) as never, call);
      // Only a call with a deadline pays for signals, made before the interceptors, which refuse an expired one.
      const deadline = deadlineMs === undefined ? undefined : createDeadlineSignal(deadlineMs);
      const linked = deadline && createLinkedAbortController(signal, deadline.signal);
      try {
        return await chain({
          stream: false,
          service: method.parent,
          method,
          requestMethod: "POST",
          url,
          signal: linked?.signal ?? signal ?? NEVER_ABORTED,
          header: new Headers(header),
          contextValues,
          message: create(method.input, input),
        });
      } catch (err) {
        // What a network client would get: code, message, metadata and details. Core has logged the
        // cause; passed on, the gateway would log it again, internals and all.
        if (!(err instanceof ConnectError)) throw new ConnectError("internal error", Code.Internal);
        if (err.cause === undefined) throw err;
        const seen = new ConnectError(err.rawMessage, err.code, err.metadata);
        seen.details = err.details;
        throw seen;
      } finally {
        deadline?.cleanup();
        linked?.abort();
      }
    },
    stream: (...args) => streaming.stream(...args),
  };
}

type ContextInit = Parameters<typeof createHandlerContext>[0];

/**
 * createHandlerContext links two AbortControllers and a deadline signal per call, a measurable cost
 * on hot requests. A call without a deadline needs none: its ctx.signal is the caller's own (or NEVER_ABORTED).
 */
function lightContext(init: ContextInit): ReturnType<typeof createHandlerContext> {
  let controller: AbortController | undefined;
  const requestSignal = init.requestSignal;
  return {
    service: init.service,
    method: init.method,
    protocolName: init.protocolName,
    requestMethod: init.requestMethod,
    url: init.url,
    get signal() {
      return controller?.signal ?? requestSignal ?? NEVER_ABORTED;
    },
    timeoutMs: () => undefined,
    requestHeader: init.requestHeader instanceof Headers ? init.requestHeader : new Headers(init.requestHeader),
    responseHeader: new Headers(),
    responseTrailer: new Headers(),
    values: init.contextValues ?? createContextValues(),
    // Only Connect's own handler code aborts a context; a signal read before stays quiet.
    abort(reason?: unknown) {
      (controller ??= new AbortController()).abort(reason);
    },
  };
}

/** Records what `routes` registers, without building HTTP handlers. */
function collectMethods(routes: (router: ConnectRouter) => void): Map<string, MethodImplSpec> {
  const methods = new Map<string, MethodImplSpec>();
  const recorder = {
    handlers: [],
    service(service: Parameters<ConnectRouter["service"]>[0], impl: Parameters<ConnectRouter["service"]>[1]) {
      for (const spec of Object.values(createServiceImplSpec(service, impl as never).methods)) {
        methods.set(`${spec.method.parent.typeName}/${spec.method.name}`, spec as MethodImplSpec);
      }
      return recorder;
    },
    rpc() {
      throw new Error("register whole services in core/routes.ts");
    },
  } as unknown as ConnectRouter;
  routes(recorder);
  return methods;
}
