import { closeTestDatabase } from "./db.js";

/** mocha root hooks: one shared database per run, closed at the end. */
export const mochaHooks = {
  async afterAll() {
    await closeTestDatabase();
  },
};
