import { csv, pagingOptions, type CommandSpec } from "./spec.js";

/** The partner command's entry in the command table (kept apart: it is the largest). */
export const PARTNER_COMMAND: CommandSpec = {
  name: "partner",
  summary: "create and manage partner API clients",
  load: async () => (await import("./partner.js")).partnerCommand,
  subcommands: [
    {
      name: "create",
      summary: "create a partner; its client_secret is shown once",
      admin: true,
      shownOnce: [
        { field: "client_secret", replacement: "partner rotate-secret replaces it" },
        { field: "webhook_secret", replacement: "partner webhook replaces it" },
      ],
      options: {
        name: { type: "string", value: "NAME", required: true, description: "display name" },
        slug: { type: "string", value: "SLUG", description: "client_id infix (default: derived from --name)" },
        entitlements: { type: "string", value: "a,b", description: csv("scopes it may request (default: the five consent scopes)") },
        status: { type: "string", value: "active|pending", description: "initial status (default active)" },
        "webhook-url": { type: "string", value: "URL", description: "webhook endpoint; its signing secret is shown once" },
        format: { type: "string", value: "text|json|env", description: "output format; env prints CLIENT_ID=... and CLIENT_SECRET=... lines" },
      },
      examples: [
        'vaultgate partner create --name "Acme"',
        'vaultgate partner create --name "Acme" --entitlements kyc:read,wallet:read',
        'eval "$(vaultgate partner create --name Acme --format env)"   # sets CLIENT_ID and CLIENT_SECRET',
      ],
    },
    {
      name: "list",
      summary: "list partners, oldest first (never their secrets)",
      readOnly: true,
      admin: true,
      options: pagingOptions("partners"),
      examples: ["vaultgate partner list", "vaultgate partner list --all --json | jq -r '.partners[].client_id'"],
    },
    {
      name: "rotate-secret",
      summary: "replace a partner's client_secret at once (shown once)",
      admin: true,
      shownOnce: [{ field: "client_secret", replacement: "partner rotate-secret replaces it" }],
      args: ["CLIENT_ID"],
      examples: ["vaultgate partner rotate-secret gpc_acme_1a2b3c4d"],
    },
    {
      name: "suspend",
      summary: "suspend a partner: token requests fail until activated",
      admin: true,
      args: ["CLIENT_ID"],
      examples: ["vaultgate partner suspend gpc_acme_1a2b3c4d"],
    },
    {
      name: "activate",
      summary: "activate a pending or suspended partner",
      admin: true,
      args: ["CLIENT_ID"],
      examples: ["vaultgate partner activate gpc_acme_1a2b3c4d"],
    },
    {
      name: "entitlements",
      summary: "replace the scopes a partner may request",
      admin: true,
      args: ["CLIENT_ID"],
      options: { set: { type: "string", value: "a,b", required: true, allowEmpty: true, description: csv("the new entitlements") } },
      examples: ["vaultgate partner entitlements gpc_acme_1a2b3c4d --set kyc:read,treasury:write", 'vaultgate partner entitlements gpc_acme_1a2b3c4d --set ""'],
    },
    {
      name: "webhook",
      summary: "set or clear a partner's webhook URL; a new signing secret is shown once",
      admin: true,
      // A secret the operator gave with --secret is theirs already: losing the echo loses nothing.
      shownOnce: [{ field: "webhook_secret", replacement: "partner webhook replaces it", suppliedBy: "secret" }],
      args: ["CLIENT_ID"],
      options: {
        url: { type: "string", value: "URL", required: true, allowEmpty: true, description: 'https URL (http only on loopback); "" clears it' },
        secret: { type: "string", value: "whsec_...", description: "signing secret to use (default: a fresh one)" },
      },
      examples: ["vaultgate partner webhook gpc_acme_1a2b3c4d --url https://acme.example/hooks", 'vaultgate partner webhook gpc_acme_1a2b3c4d --url ""'],
    },
  ],
};
