import { spawn, type ChildProcess } from "node:child_process";
import { fileURLToPath } from "node:url";

const script = fileURLToPath(new URL("./oidc-idp-server.ts", import.meta.url));

export type IdpTamper = "none" | "issuer" | "audience" | "nonce" | "signature" | "expired" | "stale-auth-time" | "future-iat" | "foreign-azp";

/**
 * Starts test/support/oidc-idp-server.ts (node-oidc-provider) as its own process, playing a
 * company's identity provider: accounts with e-mail claims, acr/amr of the next sign-in,
 * tampered ID tokens and a discovery outage on demand.
 */
export async function startIdp(options: { redirectUris: string[]; clientId?: string; clientSecret?: string; port?: number; issuerPath?: string }) {
  const clientId = options.clientId ?? "vaultgate";
  const clientSecret = options.clientSecret ?? "vaultgate-idp-secret";
  const child: ChildProcess = spawn(process.execPath, ["--import", "tsx", script], {
    env: {
      ...process.env,
      IDP_CLIENT_ID: clientId,
      IDP_CLIENT_SECRET: clientSecret,
      IDP_REDIRECT_URIS: options.redirectUris.join(","),
      IDP_PORT: String(options.port ?? 0),
      IDP_PATH: options.issuerPath ?? "",
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  const issuer = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`identity provider did not start:\n${out}`));
    }, 60_000);
    child.stdout!.on("data", (c: Buffer) => {
      out += c.toString();
      const line = out.split("\n").find((l) => l.startsWith("{"));
      if (line) {
        clearTimeout(timer);
        resolve((JSON.parse(line) as { issuer: string }).issuer);
      }
    });
    child.stderr!.on("data", (c: Buffer) => (out += c.toString()));
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`identity provider exited (${code}):\n${out}`));
    });
  });
  const base = issuer.replace(/\/+$/, "");
  const control = async (path: string, body: unknown) => {
    const res = await fetch(`${base}/__test/${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    if (!res.ok) throw new Error(`idp control ${path}: ${res.status}`);
  };
  return {
    issuer,
    clientId,
    clientSecret,
    addAccount: (a: { sub: string; email: string; email_verified: boolean }) => control("account", a),
    tamper: (mode: IdpTamper) => control("tamper", { mode }),
    setDown: (down: boolean) => control("down", { down }),
    /** The provider's own time on each request since the last call (path and ms, measured inside it). */
    async takeTimings(): Promise<{ path: string; ms: number }[]> {
      const res = await fetch(`${base}/__test/timings`, { method: "POST" });
      return (await res.json()) as { path: string; ms: number }[];
    },
    /** The acr and amr the provider reports for the next sign-ins. */
    setLogin: (login: { acr: string; amr: string[] }) => control("login", login),
    /**
     * Plays the browser without one: follows the authorization URL through the provider's
     * login form as `account` and answers the redirect back to us (the callback URL).
     */
    async signIn(authorizationUrl: string, account: string): Promise<string> {
      const jar = new Map<string, string>();
      const cookies = () => [...jar].map(([k, v]) => `${k}=${v}`).join("; ");
      const keep = (res: Response) => {
        for (const c of res.headers.getSetCookie()) {
          const [pair] = c.split(";");
          const i = pair!.indexOf("=");
          jar.set(pair!.slice(0, i), pair!.slice(i + 1));
        }
      };
      let url = authorizationUrl;
      let init: RequestInit = {};
      for (let hop = 0; hop < 10; hop++) {
        if (!url.startsWith(issuer)) return url;
        const res = await fetch(url, { ...init, redirect: "manual", headers: { ...(init.headers as Record<string, string>), cookie: cookies() } });
        keep(res);
        const location = res.headers.get("location");
        if (location) {
          url = new URL(location, url).href;
          init = {};
          continue;
        }
        const page = await res.text();
        if (res.status !== 200 || !/<form method="post"/.test(page)) throw new Error(`identity provider answered ${res.status}: ${page.slice(0, 300)}`);
        init = {
          method: "POST",
          body: new URLSearchParams({ account, password: "x" }).toString(),
          headers: { "content-type": "application/x-www-form-urlencoded" },
        };
      }
      throw new Error("too many redirects at the identity provider");
    },
    async stop() {
      // Stopped already (a test may stop it early): a signal leaves exitCode null.
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise((resolve) => child.once("exit", resolve));
      child.kill("SIGTERM");
      await exited;
    },
  };
}

export type TestIdp = Awaited<ReturnType<typeof startIdp>>;
