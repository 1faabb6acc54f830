// The edge corpus (schemas/edges/corpus.jsonl) against ajv: every line the
// corpus does not leave to a rule in words (rule "i-json") is valid
// against the bundle's AgentMessage exactly when the corpus says so, which
// is also what a real host answers (capabilities/all/edges_test.go). ajv
// runs in 2020-12 mode with strict: true, so compiling the bundle with a
// single strict-mode warning fails too, and the errors of a refused line
// must come from the message of its own type (AgentMessage dispatches on
// type), never one per member of the union.
//
// usage: node .ci/contract/edges.mjs <gen/contract dir> <corpus.jsonl>
import { readFileSync } from "node:fs";
import path from "node:path";
import Ajv2020 from "ajv/dist/2020.js";

const [dir, corpus] = process.argv.slice(2).map((p) => path.resolve(p));
if (!dir || !corpus) {
  console.error("usage: node edges.mjs <gen/contract dir> <corpus.jsonl>");
  process.exit(2);
}
const bundle = JSON.parse(readFileSync(path.join(dir, "aep.schema.json"), "utf8"));
const warnings = [];
const logger = { log() {}, warn: (...a) => warnings.push(a.join(" ")), error: (...a) => warnings.push(a.join(" ")) };
const ajv = new Ajv2020({ strict: true, logger });
ajv.addSchema(bundle);
const agent = ajv.getSchema(bundle.$id + "#/$defs/AgentMessage");
ajv.getSchema(bundle.$id + "#/$defs/HostMessage");
ajv.getSchema(bundle.$id); // the root: every def compiled
let failed = 0;
const fail = (m) => {
  failed++;
  console.error("FAIL " + m);
};
for (const w of warnings) fail(`ajv strict mode: ${w}`);

let checked = 0, left = 0, refused = 0;
const lines = readFileSync(corpus, "utf8").split("\n").filter(Boolean);
lines.forEach((rec, i) => {
  const r = JSON.parse(rec);
  if (r.rule) {
    left++;
    return;
  }
  checked++;
  let v, parsed = true;
  try {
    v = JSON.parse(r.line);
  } catch {
    parsed = false;
  }
  const ok = parsed && agent(v);
  if (ok !== r.valid) {
    fail(`corpus line ${i + 1} (${r.why}): ajv says valid=${ok}, the corpus ${r.valid}: ${ajv.errorsText(agent.errors)}`);
    return;
  }
  if (!ok && parsed && agent.errors) {
    refused++;
    // A refusal names the message of the line's own type: no error of
    // another member (AgentMessage dispatches on type with if/then).
    const own = typeof v?.type === "string" ? v.type : undefined;
    const stray = agent.errors.filter((e) => (e.keyword === "oneOf" || e.keyword === "anyOf") && e.instancePath === "");
    if (stray.length) fail(`corpus line ${i + 1}: ajv reports a union's branches for ${own}: ${ajv.errorsText(stray)}`);
  }
});
if (checked < 150) fail(`only ${checked} corpus lines checked`);
console.log(`ajv (2020-12, strict: true, ${warnings.length} warnings): ${checked} corpus lines agree (${refused} refused), ${left} left to rules in words`);
if (failed) {
  console.error(`${failed} failures`);
  process.exit(1);
}
