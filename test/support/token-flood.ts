import { request as httpRequest } from "node:http";
import { randomBytes } from "node:crypto";
import { basic, postToken } from "./partners.js";
import { postForm } from "./agent-oauth.js";

/** Flooding the token endpoints with bad credentials, from chosen local addresses. */
export const CC = "grant_type=client_credentials";
export const REDIRECT = "http://127.0.0.1:9/callback";
/** The parameters client secrets were hashed with before: about 50 ms a derivation here. */
export const OLD_SCRYPT = { N: 2 ** 14, r: 8, p: 1 };

export interface Answer {
  status: number;
  retryAfter: string | null;
  body: { error?: string; access_token?: string };
}

/** POSTs to the token endpoint from a chosen loopback source address (a distinct client address for the gateway). */
export function postTokenFrom(url: string, localAddress: string, authorization: string): Promise<Answer> {
  const target = new URL(`${url}/api/partner/oauth/token`);
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      {
        host: target.hostname,
        port: target.port,
        path: target.pathname,
        method: "POST",
        localAddress,
        agent: false,
        headers: { "content-type": "application/x-www-form-urlencoded", authorization, "content-length": Buffer.byteLength(CC) },
      },
      (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (c: string) => (text += c));
        res.on("end", () =>
          resolve({ status: res.statusCode!, retryAfter: (res.headers["retry-after"] as string | undefined) ?? null, body: JSON.parse(text) }),
        );
      },
    );
    req.on("error", reject);
    req.end(CC);
  });
}

export async function post(url: string, authorization: string): Promise<Answer> {
  const res = await postToken(url, CC, { authorization });
  return { status: res.status, retryAfter: res.headers.get("retry-after"), body: (await res.json()) as Answer["body"] };
}

export const randomClient = () => basic(`gpc_flood_${randomBytes(4).toString("hex")}`, `gps_${randomBytes(32).toString("base64url")}`);

/** A refresh at the agent token endpoint for a made-up client id. */
export const randomAgentForm = () => ({
  grant_type: "refresh_token",
  refresh_token: "vgr_nope",
  client_id: randomBytes(16).toString("hex"),
  client_secret: randomBytes(32).toString("base64url"),
});

export async function postAgentToken(url: string, form: Record<string, string>): Promise<Answer> {
  const res = await postForm(`${url}/oauth2/token`, form);
  return { status: res.status, retryAfter: res.headers.get("retry-after"), body: res.body as Answer["body"] };
}

/**
 * Wrong secrets for random client ids until `stop()` (or `cap`, so a broken server cannot make it
 * spin forever). `spread` sends each loop from its own loopback address, since one address's checks queue.
 */
export function startFlood(url: string, connections: number, cap = 5000, spread = false, send?: () => Promise<Answer>) {
  const answers: Answer[] = [];
  let stopped = false;
  let firstShed: () => void;
  const shed = new Promise<void>((resolve) => (firstShed = resolve));
  const waiting: { n: number; resolve: () => void }[] = [];
  let failed = 0;
  const loops = Array.from({ length: connections }, async (_, n) => {
    while (!stopped && answers.length < cap) {
      const a = send ? await send() : spread ? await postTokenFrom(url, `127.0.1.${n + 1}`, randomClient()) : await post(url, randomClient());
      answers.push(a);
      if (a.status === 503) firstShed();
      if (a.status === 401) failed++;
      for (const w of waiting.filter((x) => failed >= x.n)) w.resolve();
    }
  });
  const done = Promise.all(loops);
  return {
    answers,
    /** Resolves once `n` flood requests were answered 401 (checked and refused), or rejects if the flood ended first. */
    failures: (n: number) =>
      Promise.race([
        new Promise<void>((resolve) => waiting.push({ n, resolve })),
        done.then(() => Promise.reject(new Error(`flood ended after ${failed} failures`))),
      ]),
    /** Resolves when the first flood request was shed (the queue is full), or rejects if the flood ended without one. */
    shed: Promise.race([shed, done.then(() => Promise.reject(new Error(`flood never filled the queue: ${answers.length} requests`)))]),
    async stop() {
      stopped = true;
      await done;
      return answers;
    },
  };
}

/** A refresh at /oauth2/token (by default for a made-up agent client id), sent from a chosen loopback source address. */
export function postAgentTokenFrom(url: string, localAddress: string, form: Record<string, string> = randomAgentForm()): Promise<Answer> {
  const target = new URL(`${url}/oauth2/token`);
  const body = new URLSearchParams(form).toString();
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      {
        host: target.hostname,
        port: target.port,
        path: target.pathname,
        method: "POST",
        localAddress,
        agent: false,
        headers: { "content-type": "application/x-www-form-urlencoded" },
      },
      (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (c: string) => (text += c));
        res.on("end", () =>
          resolve({ status: res.statusCode!, retryAfter: (res.headers["retry-after"] as string | undefined) ?? null, body: JSON.parse(text) }),
        );
      },
    );
    req.on("error", reject);
    req.end(body);
  });
}
