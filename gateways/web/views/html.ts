import { AGENTS_PATH, MONEY_PATH, PASSKEYS_PATH, SIGNOUT_PATH } from "../paths.js";

/** Escapes a value for HTML text and double-quoted attributes (every page value goes through it). */
function esc(value: unknown): string {
  return String(value ?? "")
    .replace(/&/g, "&amp;")
    .replace(/</g, "&lt;")
    .replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;")
    .replace(/'/g, "&#39;");
}

/** A fragment that is already safe HTML. */
export interface Html {
  readonly html: string;
}

/** Tagged template: interpolated values are escaped unless they are Html (or arrays of it). */
export function html(strings: TemplateStringsArray, ...values: unknown[]): Html {
  let out = strings[0]!;
  values.forEach((v, i) => {
    out += render(v) + strings[i + 1]!;
  });
  return { html: out };
}

function render(v: unknown): string {
  if (Array.isArray(v)) return v.map(render).join("");
  if (v && typeof v === "object" && "html" in v) return (v as Html).html;
  if (v === undefined || v === null || v === false) return "";
  return esc(v);
}

const STYLE = `
body{font:16px/1.5 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;background:#f6f7f9;color:#1b1f24}
main{max-width:36rem;margin:0 auto;padding:1.25rem}
h1{font-size:1.4rem;margin:.5rem 0 1rem}h2{font-size:1.1rem;margin:1.5rem 0 .5rem}
.card{background:#fff;border:1px solid #dde1e6;border-radius:10px;padding:1rem;margin:0 0 1rem}
label{display:block;font-weight:600;margin:.5rem 0 .25rem}
input[type=email],input[type=text]{width:100%;box-sizing:border-box;font-size:1.1rem;padding:.6rem;border:1px solid #aab2bd;border-radius:8px}
button{font-size:1rem;padding:.65rem 1rem;border-radius:8px;border:1px solid #1b4fd8;background:#1b4fd8;color:#fff;margin:.5rem .5rem 0 0;min-height:44px}
button.secondary{background:#fff;color:#1b4fd8}button.danger{background:#b42318;border-color:#b42318}
ul.scopes{padding-left:1.2rem}code{word-break:break-all}.muted{color:#5b6572;font-size:.9rem}
.error{background:#fdecea;border-color:#f5c2bd}.ok{background:#ecfdf3;border-color:#b7ebc6}
table{width:100%;border-collapse:collapse}td,th{text-align:left;padding:.35rem;border-bottom:1px solid #eef0f3;vertical-align:top}
nav a{margin-right:1rem}
.num{font-variant-numeric:tabular-nums}.big{font-size:1.5rem;font-weight:700}.balance{margin:.5rem 0}
.vault-head{display:flex;justify-content:space-between;align-items:baseline;gap:.5rem}.vault-head h3{margin:0;font-size:1.05rem}
.card.budget{margin-left:.75rem;border-left:4px solid #1b4fd8}
.status{font-size:.8rem;padding:.1rem .5rem;border-radius:999px;background:#eef0f3;color:#5b6572;white-space:nowrap}
.status-active{background:#ecfdf3;color:#05603a}.status-draft{background:#fff6e5;color:#8a4b00}
.bar{margin:.6rem 0}.bar-text{display:flex;justify-content:space-between;gap:.5rem;font-size:.95rem}
meter{display:block;width:100%;height:1.1rem;margin-top:.15rem}
details summary{cursor:pointer;font-weight:600;margin:.5rem 0}.payments td{font-size:.9rem}.payments code{word-break:normal;white-space:nowrap}
.money-form{border-top:1px solid #eef0f3;margin-top:.75rem;padding-top:.25rem}
label.check{display:flex;gap:.5rem;align-items:center;font-weight:400}
`;

/** The page shell: phone-readable, no scripts; the Passkeys link only where passkeys are offered. */
export function page(title: string, body: Html, opts: { email?: string; csrf?: string; passkeys?: boolean } = {}): string {
  const nav = opts.email
    ? html`<nav class="muted">Signed in as ${opts.email} · <a href="${AGENTS_PATH}">Your agents</a> · <a href="${MONEY_PATH}">Your money</a>${opts.passkeys ? html` · <a href="${PASSKEYS_PATH}">Passkeys</a>` : ""}
        <form method="post" action="${SIGNOUT_PATH}" style="display:inline"><input type="hidden" name="csrf" value="${opts.csrf ?? ""}"><button class="secondary" type="submit">Sign out</button></form></nav>`
    : html``;
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${esc(title)} · Vaultgate</title><style>${STYLE}</style></head><body><main>${nav.html}<h1>${esc(title)}</h1>${body.html}</main></body></html>`;
}
