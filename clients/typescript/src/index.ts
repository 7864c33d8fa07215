// A TypeScript caller of Switchboard's decider: decide, call the provider
// yourself, report. The generated messages and RouterService are exported
// too (gen), for the lower-level client (Router.rpc).

export * from "./client.js";
export * from "./errors.js";
export * from "./prompt.js";
export * as router from "./gen/switchboard/v1/router_pb.js";
export * as common from "./gen/switchboard/v1/common_pb.js";
