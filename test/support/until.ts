import { expect } from "chai";

/** Polls until `done` holds (the server's state, not a time), for at most about 10 s; then asserts it, named `what`. */
export async function until(what: string, done: () => Promise<boolean>): Promise<void> {
  for (let i = 0; i < 1000 && !(await done()); i++) await new Promise((r) => setTimeout(r, 10));
  expect(await done(), what).to.equal(true);
}
