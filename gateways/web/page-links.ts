import { PageError } from "./context.js";

/** The query parameters that carry where each paged list of a page resumes (core's signed cursors). */
export const LISTS = { agents: "agents_after", grants: "grants_after", budgets: "budgets_after", payments: "payments_after" } as const;
export type List = keyof typeof LISTS;
/** Where each of a page's lists stands ("" or absent: its first page). */
export type ListCursors = Partial<Record<List, string>>;

/** What a cursor may look like in an address (core/paging.ts: base64url, a dot, base64url). */
const CURSOR = /^[A-Za-z0-9_-]{1,1024}\.[A-Za-z0-9_-]{1,64}$/;

/** The page for a cursor core refused (changed, another user's or another list's). */
export const expiredLink = () =>
  new PageError(400, "This page link cannot be used", "It may have been changed or it belongs to another account. Start again from the first page.");

/** A cursor from the page's query ("" when none), checked for shape (a bad one is a 400 page, never sent on). */
export function cursorParam(query: Record<string, unknown>, name: string): string {
  const v = query[name];
  if (v === undefined || v === "") return "";
  if (typeof v !== "string" || !CURSOR.test(v)) throw expiredLink();
  return v;
}

/** Where the page's query says each of `lists` stands. */
export function listCursors(query: Record<string, unknown>, lists: List[]): ListCursors {
  return Object.fromEntries(lists.map((l) => [l, cursorParam(query, LISTS[l])]));
}

/** The page's address with each list at its cursor, so a link that moves one list keeps the others where they are. */
export function pageLink(path: string, cursors: ListCursors): string {
  const q = new URLSearchParams();
  for (const [list, param] of Object.entries(LISTS)) {
    const c = cursors[list as List];
    if (c) q.set(param, c);
  }
  const qs = q.toString();
  return qs ? `${path}?${qs}` : path;
}
