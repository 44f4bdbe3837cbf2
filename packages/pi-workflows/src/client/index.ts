// The client.v1 client for TypeScript callers (the Pi extension, scripts).
export * from "./protocol.js";
export * from "./patch.js";
export * from "./client.js";
export * from "./identity.js";
