import http2 from "node:http2";

/** One Connect unary call in JSON over h2c to core's port, as curl would make it: the status and the body. */
export async function connectJson(
  baseUrl: string,
  path: string,
  body: string | Buffer,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: Record<string, unknown> }> {
  const session = http2.connect(baseUrl);
  try {
    const req = session.request({
      ":method": "POST",
      ":path": path,
      "content-type": "application/json",
      "content-length": String(Buffer.byteLength(body)),
      ...headers,
    });
    req.on("error", () => {}); // the server may answer before it read the whole body, then reset the stream
    req.end(body);
    const status = await new Promise<number>((resolve) => req.on("response", (h) => resolve(Number(h[":status"]))));
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    return { status, body: JSON.parse(Buffer.concat(chunks).toString()) as Record<string, unknown> };
  } finally {
    session.close();
  }
}
