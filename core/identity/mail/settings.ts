// The checks of the mail settings, apart from the transport so reading settings loads no mailer.

/** Checks an SMTP_URL; the message names the setting, never its value (it may hold a password). */
export function checkSmtpUrl(raw: string): string | undefined {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return "SMTP_URL must be a URL such as smtps://user:password@mail.example.com:465";
  }
  if (url.protocol !== "smtp:" && url.protocol !== "smtps:") return "SMTP_URL must start with smtp:// (STARTTLS) or smtps:// (TLS)";
  if (!url.hostname) return "SMTP_URL must name the mail server's host";
  if (url.pathname && url.pathname !== "/" && url.pathname !== "") return "SMTP_URL must not have a path";
  return undefined;
}

/** A plain e-mail address for MAIL_FROM, optionally as `Name <address>`. */
export function checkMailFrom(raw: string): string | undefined {
  const m = /^(?:[^<>\r\n"]{1,100} )?<([^<>\s@]+@[^<>\s@]+\.[^<>\s@]+)>$|^([^<>\s@]+@[^<>\s@]+\.[^<>\s@]+)$/.exec(raw.trim());
  return m ? undefined : "MAIL_FROM must be an e-mail address, optionally as `Vaultgate <no-reply@example.com>`";
}
