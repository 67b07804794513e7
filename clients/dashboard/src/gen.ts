// The generated stubs (clients/typescript), re-exported from one place.
export * from "../../typescript/src/gen/index.js";
