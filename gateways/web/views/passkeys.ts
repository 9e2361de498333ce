import type { Passkey } from "../../../gen/vaultgate/grants/v1/signin_pb.js";
import { utcMinute } from "../format.js";
import { PASSKEYS_PATH } from "../paths.js";
import { html, type Html } from "./html.js";

export const PASSKEYS_SCRIPT_PATH = "/static/passkeys.js";

const NOSCRIPT = html`<noscript><div class="card error"><p>Passkeys need JavaScript in this browser. Turn it on and reload this page, or use another way to confirm it is you.</p></div></noscript>`;

/** A form the passkeys script drives; hidden until the script runs, so without it only the note shows. */
export function ceremonyForm(o: {
  kind: "create" | "get";
  action: string;
  optionsJson: string;
  csrf: string;
  /** Names the ceremony's cookie (not a secret): the POST reads that one. */
  flow: string;
  returnTo?: string;
  button: string;
  intro: string;
  askName?: boolean;
}): Html {
  return html`${NOSCRIPT}
    <form class="card" method="post" action="${o.action}" data-passkey="${o.kind}" data-options="${o.optionsJson}" hidden>
      <p>${o.intro}</p>
      <input type="hidden" name="csrf" value="${o.csrf}"><input type="hidden" name="flow" value="${o.flow}"><input type="hidden" name="response" value="">
      ${o.returnTo ? html`<input type="hidden" name="return_to" value="${o.returnTo}">` : ""}
      ${o.askName ? html`<label for="name">A name for this passkey</label><input id="name" type="text" name="name" maxlength="60" placeholder="e.g. work laptop">` : ""}
      <p class="muted" data-passkey-error role="alert"></p>
      <button type="submit">${o.button}</button>
    </form>
    <script src="${PASSKEYS_SCRIPT_PATH}"></script>`;
}

/** Said wherever passkeys would be managed on a server that does not offer them. */
export const PASSKEYS_NOT_ENABLED = "Passkeys are not enabled on this server.";

/**
 * The dashboard's passkeys: name, when added, last used, backed up; remove buttons. Not
 * offered: no Add button, and any passkeys added while they were offered can still be removed.
 */
export function passkeyList(keys: Passkey[], csrf: string, o: { offered: boolean; notice?: string }): Html {
  const rows = keys.map(
    (
      k,
    ) => html`<tr><td>${k.name}</td><td>${utcMinute(k.createdAt)}</td><td>${k.lastUsedAt ? utcMinute(k.lastUsedAt) : "never"}</td><td>${k.backedUp ? "yes" : "no"}</td>
      <td><form method="post" action="${PASSKEYS_PATH}/${k.passkeyId}/remove"><input type="hidden" name="csrf" value="${csrf}"><button class="danger" type="submit">Remove</button></form></td></tr>`,
  );
  const table = html`<table><thead><tr><th>Name</th><th>Added</th><th>Last used</th><th>Backed up</th><th></th></tr></thead><tbody>${rows}</tbody></table>`;
  const body = o.offered
    ? html`${keys.length === 0 ? html`<p>You have no passkeys yet. A passkey lets you confirm payments with your fingerprint, face or device PIN.</p>` : table}
      <p><a class="button" href="${PASSKEYS_PATH}/add">Add a passkey</a></p>
      <p class="muted">Adding a passkey asks you to confirm it is you first.</p>`
    : html`<p>${PASSKEYS_NOT_ENABLED}</p>
      ${keys.length === 0 ? "" : html`<p class="muted">These passkeys were added before and cannot be used here now; you may remove them.</p>${table}`}`;
  return html`${o.notice ? html`<div class="card ok"><p>${o.notice}</p></div>` : ""}<div class="card">${body}</div>`;
}
