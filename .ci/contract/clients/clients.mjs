// Clients that stock generators make from the contract, sending to a real
// host (docs/contract.md, Generated clients): quicktype turns every def of
// gen/contract/aep.schema.json (the input "aep.schema.json#/$defs/") into
// one type per message in Go, TypeScript, Python, Rust and Java, with the
// options docs/contract.md names; this script runs it and writes, into a
// scratch directory, what each language's driver (go/main.go, ts/send.ts,
// py/send.py, rust/main.rs, java/Send.java, beside this file) needs:
// requests.json, one line of every message type an agent sends (every
// valid example of schemas/examples for each type; the handshake first,
// with the host's token and every capability; shutdown last), and, for
// Go, Rust and Java, the table from a def's name to its generated type.
//
// usage: node clients.mjs <gen/contract dir> <schemas/examples dir> <work dir> <token>
import { spawnSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const [contractDir, examplesDir, work, token] = process.argv.slice(2);
if (!token) {
  console.error("usage: node clients.mjs <gen/contract dir> <schemas/examples dir> <work dir> <token>");
  process.exit(2);
}
const bundlePath = path.resolve(contractDir, "aep.schema.json");
const bundle = JSON.parse(readFileSync(bundlePath, "utf8"));
const defs = bundle.$defs;
const agent = defs.AgentMessage.allOf.map((r) => ({
  type: r.if.properties.type.const,
  def: r.then.$ref.replace("#/$defs/", ""),
}));

function examplesOf(type) {
  let dir = path.join(examplesDir, type);
  let retype = false;
  const valid = (d) => (existsSync(d) ? readdirSync(d).filter((f) => f.startsWith("valid--")).sort() : []);
  let files = valid(dir);
  if (files.length === 0) {
    // The spec's bare env/data/* spellings share their /req form's examples.
    dir = path.join(examplesDir, type, "req");
    files = valid(dir);
    retype = true;
  }
  return files.map((f) => {
    const v = JSON.parse(readFileSync(path.join(dir, f), "utf8"));
    if (retype) v.type = type;
    return { name: f.replace(/\.json$/, ""), value: v };
  });
}

const caps = defs.CapabilityName.enum;
const requests = [];
for (const { type, def } of agent) {
  const exs = examplesOf(type);
  if (exs.length === 0) throw new Error(`no valid example of ${type}`);
  for (const ex of exs) {
    const v = ex.value;
    if (type === "handshake/req") {
      v.auth_token = token;
      v.agent_caps = caps;
      delete v.record_trajectory;
    }
    v.id = `${type}/${ex.name}`;
    requests.push({ type, def, name: ex.name, line: JSON.stringify(v) });
  }
}
const rank = (r) => (r.type === "handshake/req" ? 0 : r.type === "shutdown" ? 2 : 1);
requests.sort((a, b) => rank(a) - rank(b) || a.type.localeCompare(b.type) || a.name.localeCompare(b.name));
// One handshake, the session's first line, and one shutdown, its last.
const hs = requests.filter((r) => r.type === "handshake/req");
requests.splice(0, hs.length, hs[0]);
const down = requests.filter((r) => r.type === "shutdown");
requests.splice(requests.length - down.length, down.length, down.at(-1));
mkdirSync(work, { recursive: true });
writeFileSync(path.join(work, "requests.json"), JSON.stringify(requests, null, 1));

// quicktype, one run per language, with the options docs/contract.md gives.
const quicktype = path.join(here, "..", "..", "node_modules", ".bin", "quicktype");
const input = bundlePath + "#/$defs/";
const runs = {
  go: ["-s", "schema", "-l", "go", "--package", "main", "--omit-empty", "-o", path.join(work, "go", "aep.go"), input],
  ts: ["-s", "schema", "-l", "typescript", "--runtime-typecheck-ignore-unknown-properties", "-o", path.join(work, "ts", "aep.ts"), input],
  py: ["-s", "schema", "-l", "python", "--python-version", "3.7", "-o", path.join(work, "py", "aep.py"), input],
  rust: ["-s", "schema", "-l", "rust", "--skip-serializing-none", "--visibility", "public", "-o", path.join(work, "rust", "src", "aep.rs"), input],
  java: ["-s", "schema", "-l", "java", "--package", "aep", "-o", path.join(work, "java", "src", "aep", "Aep.java"), input],
};
for (const [lang, args] of Object.entries(runs)) {
  mkdirSync(path.dirname(args.at(-2)), { recursive: true });
  console.log(`quicktype ${args.map((a) => (a.startsWith(work) ? path.relative(work, a) : a === input ? "aep.schema.json#/$defs/" : a)).join(" ")}`);
  // quicktype's Go output notes each field of any JSON value on stderr
  // ("cannot infer this type"): interface{}, as the contract means.
  const r = spawnSync(quicktype, args, { encoding: "utf8" });
  if (r.status !== 0) {
    process.stderr.write(r.stderr);
    throw new Error(`quicktype ${lang} exited ${r.status}`);
  }
  const notes = (r.stderr.match(/^Issue in line/gm) || []).length;
  if (notes) console.log(`  (${notes} fields of any JSON value: ${lang === "go" ? "interface{}" : "any"})`);
}

// Go: the driver, and the table of every def an agent sends.
copyFileSync(path.join(here, "go", "main.go"), path.join(work, "go", "main.go"));
writeFileSync(path.join(work, "go", "go.mod"), "module aepclient\n\ngo 1.22\n");
// quicktype names Go types in its own case (McpServerListReqMessage →
// MCPServerListReqMessage): each def's Unmarshal function is found by name
// without regard to case.
const goNames = new Map();
for (const m of readFileSync(path.join(work, "go", "aep.go"), "utf8").matchAll(/^func Unmarshal(\w+)\(/gm)) goNames.set(m[1].toLowerCase(), m[1]);
let table = "// Written by .ci/contract/clients/clients.mjs: each agent message's\n// generated decoder and encoder, by def name.\npackage main\n\nvar codecs = map[string]func([]byte) ([]byte, error){\n";
for (const def of [...new Set(agent.map((a) => a.def))].sort()) {
  const name = goNames.get(def.toLowerCase());
  if (!name) throw new Error(`quicktype's Go has no Unmarshal for ${def}`);
  table += `\t${JSON.stringify(def)}: func(b []byte) ([]byte, error) {\n\t\tv, err := Unmarshal${name}(b)\n\t\tif err != nil {\n\t\t\treturn nil, err\n\t\t}\n\t\treturn v.Marshal()\n\t},\n`;
}
table += "}\n";
writeFileSync(path.join(work, "go", "table.go"), table);

// TypeScript: the driver and a tsconfig for tsc --strict.
copyFileSync(path.join(here, "ts", "send.ts"), path.join(work, "ts", "send.ts"));
writeFileSync(path.join(work, "ts", "tsconfig.json"), JSON.stringify({
  compilerOptions: {
    strict: true, target: "es2022", module: "nodenext", moduleResolution: "nodenext",
    types: ["node"], typeRoots: [path.join(here, "..", "..", "node_modules", "@types")],
    outDir: "out", rootDir: ".",
  },
  files: ["send.ts", "aep.ts"],
}, null, 1));
writeFileSync(path.join(work, "ts", "package.json"), JSON.stringify({ type: "module" }));

// Rust: a cargo package built offline against Debian's crates
// (/usr/share/cargo/registry, librust-serde-json-dev), the driver, and the
// table of every def an agent sends.
const rs = path.join(work, "rust");
mkdirSync(path.join(rs, ".cargo"), { recursive: true });
writeFileSync(path.join(rs, "Cargo.toml"), '[package]\nname = "aepclient"\nversion = "0.1.0"\nedition = "2021"\n\n# No debug info: the driver never needs a debugger, and the build is shorter.\n[profile.dev]\ndebug = false\n\n[dependencies]\nserde = { version = "1", features = ["derive"] }\nserde_json = "1"\n');
writeFileSync(path.join(rs, ".cargo", "config.toml"), '[source.crates-io]\nreplace-with = "debian"\n\n[source.debian]\ndirectory = "/usr/share/cargo/registry"\n\n[net]\noffline = true\n');
copyFileSync(path.join(here, "rust", "main.rs"), path.join(rs, "src", "main.rs"));
const rsNames = new Map();
for (const m of readFileSync(path.join(rs, "src", "aep.rs"), "utf8").matchAll(/^pub struct (\w+)/gm)) rsNames.set(m[1].toLowerCase(), m[1]);
let rsTable = "// Written by .ci/contract/clients/clients.mjs: each agent message's\n// generated type, by def name, decoding a line and serializing it again.\n\nfn rt<T: serde::de::DeserializeOwned + serde::Serialize>(line: &str) -> Result<String, String> {\n    let v: T = serde_json::from_str(line).map_err(|e| e.to_string())?;\n    serde_json::to_string(&v).map_err(|e| e.to_string())\n}\n\npub fn codec(def: &str, line: &str) -> Option<Result<String, String>> {\n    match def {\n";
for (const def of [...new Set(agent.map((a) => a.def))].sort()) {
  const name = rsNames.get(def.toLowerCase());
  if (!name) throw new Error(`quicktype's Rust has no struct for ${def}`);
  rsTable += `        ${JSON.stringify(def)} => Some(rt::<crate::aep::${name}>(line)),\n`;
}
rsTable += "        _ => None,\n    }\n}\n";
writeFileSync(path.join(rs, "src", "table.rs"), rsTable);

// Java: the driver, and each def's generated class (one file per class,
// named as quicktype spells it), for Send.java to load by name.
const jv = path.join(work, "java");
copyFileSync(path.join(here, "java", "Send.java"), path.join(jv, "src", "Send.java"));
const jvNames = new Map();
for (const f of readdirSync(path.join(jv, "src", "aep"))) if (f.endsWith(".java")) jvNames.set(f.slice(0, -5).toLowerCase(), f.slice(0, -5));
let jvTable = "";
for (const def of [...new Set(agent.map((a) => a.def))].sort()) {
  const name = jvNames.get(def.toLowerCase());
  if (!name) throw new Error(`quicktype's Java has no class for ${def}`);
  jvTable += `${def}\t${name}\n`;
}
writeFileSync(path.join(jv, "classes.tsv"), jvTable);

// Python: the driver beside the generated module.
copyFileSync(path.join(here, "py", "send.py"), path.join(work, "py", "send.py"));
console.log(`${requests.length} requests of ${new Set(requests.map((r) => r.type)).size} types`);
