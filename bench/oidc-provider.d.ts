// oidc-provider ships no type declarations; the bench uses it as an untyped peer.
declare module "oidc-provider";
