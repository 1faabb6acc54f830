// Checks that the TypeScript SDK's generated types
// (sdk/typescript/src/messages.gen.ts, tools/tsgen) agree with what the
// stock json-schema-to-typescript makes of the same bundle (default
// settings, as docs/contract.md shows): for every message interface the
// same `type` discriminant, the same required fields and the same
// optional ones; and the same members in the SDK's AgentMessage and
// HostMessage unions as in the stock AnyAgentMessage and AnyHostMessage. Both files are read with the TypeScript compiler's parser.
//
// usage: node .ci/contract/ts-sdk-compat.mjs <aep.schema.json> <messages.gen.ts>
import { readFile } from "node:fs/promises";
import { compile } from "json-schema-to-typescript";
import ts from "typescript";

const [bundlePath, sdkPath] = process.argv.slice(2);
if (!bundlePath || !sdkPath) {
  console.error("usage: node ts-sdk-compat.mjs <aep.schema.json> <messages.gen.ts>");
  process.exit(2);
}

// shapes returns, per exported object type, its `type` literal (or null)
// and its required and optional property names; per exported union alias,
// its member names.
function shapes(name, text) {
  const sf = ts.createSourceFile(name, text, ts.ScriptTarget.ES2022, false, ts.ScriptKind.TS);
  const interfaces = new Map();
  const unions = new Map();
  // An object's members: an interface's, or those of the type literal of
  // an alias (json-schema-to-typescript writes a message with allOf or
  // anyOf rules as `type X = {…}` or `type X = Rule & {…}`).
  const literalOf = (t) => {
    if (ts.isTypeLiteralNode(t)) return t;
    if (ts.isIntersectionTypeNode(t)) return t.types.find(ts.isTypeLiteralNode);
    return undefined;
  };
  const record = (name, members) => {
    const required = [], optional = [];
    let discriminant = null;
    for (const m of members) {
      if (!ts.isPropertySignature(m) || !m.name) continue; // index signatures
      const key = ts.isStringLiteral(m.name) ? m.name.text : m.name.getText(sf);
      (m.questionToken ? optional : required).push(key);
      if (key === "type" && m.type && ts.isLiteralTypeNode(m.type) && ts.isStringLiteral(m.type.literal)) discriminant = m.type.literal.text;
    }
    interfaces.set(name, { discriminant, required: required.sort(), optional: optional.sort() });
  };
  for (const st of sf.statements) {
    if (ts.isInterfaceDeclaration(st)) {
      record(st.name.text, st.members);
    } else if (ts.isTypeAliasDeclaration(st)) {
      const lit = literalOf(st.type);
      if (lit) record(st.name.text, lit.members);
      else if (ts.isUnionTypeNode(st.type)) unions.set(st.name.text, st.type.types.map((t) => t.getText(sf)).sort());
    }
  }
  return { interfaces, unions };
}

const bundle = JSON.parse(await readFile(bundlePath, "utf8"));
const stock = shapes("stock.ts", await compile(bundle, "AepMessage", { bannerComment: "" }));
const sdk = shapes("sdk.ts", await readFile(sdkPath, "utf8"));

let failed = 0;
const fail = (msg) => {
  failed++;
  console.error("FAIL " + msg);
};
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

let messages = 0;
for (const [name, s] of stock.interfaces) {
  if (s.discriminant === null) continue;
  messages++;
  const o = sdk.interfaces.get(name);
  if (!o) {
    fail(`${name} (${s.discriminant}) is missing from the SDK`);
    continue;
  }
  if (o.discriminant !== s.discriminant) fail(`${name}: type ${JSON.stringify(o.discriminant)}, stock ${JSON.stringify(s.discriminant)}`);
  if (!same(o.required, s.required)) fail(`${name}: required ${o.required.join(",")}; stock ${s.required.join(",")}`);
  if (!same(o.optional, s.optional)) fail(`${name}: optional ${o.optional.join(",")}; stock ${s.optional.join(",")}`);
}
for (const [name, o] of sdk.interfaces) {
  if (o.discriminant !== null && !stock.interfaces.has(name)) fail(`${name} (${o.discriminant}) is in the SDK but not in the stock output`);
}
// The bundle's AgentMessage and HostMessage dispatch on `type` with
// if/then, which the stock generator does not make a union of; their
// oneOf twins AnyAgentMessage and AnyHostMessage, made for generators,
// hold the same messages. The SDK's unions keep the short names.
for (const [u, any] of [["AgentMessage", "AnyAgentMessage"], ["HostMessage", "AnyHostMessage"]]) {
  const s = stock.unions.get(any), o = sdk.unions.get(u);
  if (!s || !o) fail(`${u}: stock ${s ? "has" : "lacks"} ${any}, the SDK ${o ? "has" : "lacks"} ${u}`);
  else if (!same(o, s)) fail(`${u}: members differ: SDK ${o.join(",")}; stock ${any} ${s.join(",")}`);
}
if (messages === 0) fail("the stock output has no message interfaces");
if (failed) {
  console.error(`${failed} differences`);
  process.exit(1);
}
console.log(`SDK types agree with json-schema-to-typescript on ${messages} messages (discriminant, required and optional fields) and on the AgentMessage and HostMessage unions (stock AnyAgentMessage, AnyHostMessage)`);
