/**
 * The browser side of passkeys, served as /static/passkeys.js: a form marked
 * data-passkey="create" or "get" runs navigator.credentials with the options in
 * data-options and posts the answer as JSON in its `response` field.
 */
export const PASSKEYS_SCRIPT = `"use strict";
(() => {
  const buf = (s) => { s = s.replace(/-/g, "+").replace(/_/g, "/"); const b = atob(s + "===".slice((s.length + 3) % 4)); return Uint8Array.from(b, (c) => c.charCodeAt(0)).buffer; };
  const b64u = (b) => { let s = ""; for (const x of new Uint8Array(b)) s += String.fromCharCode(x); return btoa(s).replace(/\\+/g, "-").replace(/\\//g, "_").replace(/=+$/, ""); };
  const ids = (list) => (list || []).map((c) => ({ ...c, id: buf(c.id) }));
  for (const form of document.querySelectorAll("form[data-passkey]")) {
    form.hidden = false;
    const note = form.querySelector("[data-passkey-error]");
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      if (!window.PublicKeyCredential) { note.textContent = "This browser cannot use passkeys."; return; }
      const o = JSON.parse(form.dataset.options);
      try {
        let out;
        if (form.dataset.passkey === "create") {
          const c = await navigator.credentials.create({ publicKey: { ...o, challenge: buf(o.challenge), user: { ...o.user, id: buf(o.user.id) }, excludeCredentials: ids(o.excludeCredentials) } });
          out = { id: c.id, rawId: b64u(c.rawId), type: c.type, clientExtensionResults: c.getClientExtensionResults(), authenticatorAttachment: c.authenticatorAttachment || undefined,
            response: { clientDataJSON: b64u(c.response.clientDataJSON), attestationObject: b64u(c.response.attestationObject), transports: c.response.getTransports ? c.response.getTransports() : [] } };
        } else {
          const c = await navigator.credentials.get({ publicKey: { ...o, challenge: buf(o.challenge), allowCredentials: ids(o.allowCredentials) } });
          out = { id: c.id, rawId: b64u(c.rawId), type: c.type, clientExtensionResults: c.getClientExtensionResults(), authenticatorAttachment: c.authenticatorAttachment || undefined,
            response: { clientDataJSON: b64u(c.response.clientDataJSON), authenticatorData: b64u(c.response.authenticatorData), signature: b64u(c.response.signature), userHandle: c.response.userHandle ? b64u(c.response.userHandle) : undefined } };
        }
        form.elements.namedItem("response").value = JSON.stringify(out);
        form.submit();
      } catch (e) {
        note.textContent = "Your passkey did not answer (" + (e && e.name ? e.name : "error") + "). Try again, or confirm another way.";
      }
    });
  }
})();
`;
