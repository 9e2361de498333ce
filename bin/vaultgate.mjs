#!/usr/bin/env node
// The operator CLI and service entry point. TypeScript runs through tsx's loader.
import { register } from "tsx/esm/api";

register();
const { main } = await import("../cli/main.ts");
process.exitCode = await main(process.argv.slice(2));
