// The checks of the mail settings, apart from the transport so reading settings loads no mailer.

/** Where and how SMTP_URL says to connect; `auth` absent when the URL names no user. */
export interface SmtpConnection {
  host: string;
  /** Absent: the scheme's usual port (465 for smtps://, 587 for smtp://). */
  port?: number;
  /** smtps://: TLS from the first byte. */
  secure: boolean;
  /** smtp://: send only after STARTTLS, unless the URL says `?starttls=optional`. */
  requireStartTls: boolean;
  auth?: { user: string; pass: string };
}

const EXAMPLE = "smtps://user:password@mail.example.com:465";

/**
 * Reads an SMTP_URL, or says what is wrong with it. The message names the setting, never its
 * value (it may hold a password). The one query parameter is `starttls=required|optional`: the
 * mailer gets only what this returns, so nothing else in the URL can turn on logging or plaintext.
 */
export function parseSmtpUrl(raw: string): SmtpConnection | string {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return `SMTP_URL must be a URL such as ${EXAMPLE}`;
  }
  if (url.protocol !== "smtp:" && url.protocol !== "smtps:") return "SMTP_URL must start with smtp:// (STARTTLS) or smtps:// (TLS)";
  if (!url.hostname) return "SMTP_URL must name the mail server's host";
  if (url.pathname && url.pathname !== "/" && url.pathname !== "") return "SMTP_URL must not have a path";
  if (url.hash) return "SMTP_URL must not have a #fragment";
  const keys = [...url.searchParams.keys()];
  if (keys.some((k) => k !== "starttls") || keys.length > 1) return "SMTP_URL takes no query parameter but starttls=required|optional";
  const starttls = url.searchParams.get("starttls") ?? "required";
  if (starttls !== "required" && starttls !== "optional") return "SMTP_URL's starttls must be required or optional";
  if (url.protocol === "smtps:" && url.searchParams.has("starttls")) return "SMTP_URL's starttls goes with smtp:// only (smtps:// is TLS from the start)";
  let user: string;
  let pass: string;
  try {
    user = decodeURIComponent(url.username);
    pass = decodeURIComponent(url.password);
  } catch {
    return "SMTP_URL's user and password must be percent-encoded";
  }
  return {
    host: url.hostname.replace(/^\[(.*)\]$/, "$1"),
    ...(url.port ? { port: Number(url.port) } : {}),
    secure: url.protocol === "smtps:",
    requireStartTls: url.protocol === "smtp:" && starttls === "required",
    ...(user || pass ? { auth: { user, pass } } : {}),
  };
}

/** parseSmtpUrl's problem, if any. */
export function checkSmtpUrl(raw: string): string | undefined {
  const parsed = parseSmtpUrl(raw);
  return typeof parsed === "string" ? parsed : undefined;
}

/** A plain e-mail address for MAIL_FROM, optionally as `Name <address>`. */
export function checkMailFrom(raw: string): string | undefined {
  const m = /^(?:[^<>\r\n"]{1,100} )?<([^<>\s@]+@[^<>\s@]+\.[^<>\s@]+)>$|^([^<>\s@]+@[^<>\s@]+\.[^<>\s@]+)$/.exec(raw.trim());
  return m ? undefined : "MAIL_FROM must be an e-mail address, optionally as `Vaultgate <no-reply@example.com>`";
}
