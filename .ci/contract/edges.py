"""The edge corpus (schemas/edges/corpus.jsonl) against python-jsonschema.

Every line the corpus does not leave to a rule in words (rule "i-json") is
valid against the bundle's AgentMessage (Draft 2020-12) exactly when the
corpus says so, which is also what a real host answers
(capabilities/all/edges_test.go) and what ajv says (edges.mjs). Python
reads JSON integers exactly, so this is the check of the 2^53 bounds that
a library reading doubles cannot make. A refused line's best error
(jsonschema.exceptions.best_match) must come from the message of the
line's own type.

usage: python3 .ci/contract/edges.py <gen/contract dir> <corpus.jsonl>
"""
import json
import sys

import jsonschema
from jsonschema.exceptions import best_match


def main() -> int:
    if len(sys.argv) != 3:
        print("usage: edges.py <gen/contract dir> <corpus.jsonl>", file=sys.stderr)
        return 2
    with open(sys.argv[1] + "/aep.schema.json", encoding="utf-8") as f:
        bundle = json.load(f)
    jsonschema.Draft202012Validator.check_schema(bundle)
    agent = jsonschema.Draft202012Validator({"$ref": "#/$defs/AgentMessage", "$defs": bundle["$defs"]})
    failed = checked = left = 0
    with open(sys.argv[2], encoding="utf-8") as f:
        for n, rec in enumerate(f, 1):
            r = json.loads(rec)
            if r.get("rule"):
                left += 1
                continue
            checked += 1
            try:
                inst = json.loads(r["line"])
            except ValueError:
                ok, errors = False, []
            else:
                errors = list(agent.iter_errors(inst))
                ok = not errors
            if ok != r["valid"]:
                failed += 1
                why = best_match(errors).message if errors else ""
                print(f"FAIL corpus line {n} ({r['why']}): python-jsonschema says valid={ok}, the corpus {r['valid']}: {why}", file=sys.stderr)
                continue
            if errors:
                own = inst.get("type") if isinstance(inst, dict) else None
                e = best_match(errors)
                path = list(e.absolute_schema_path)
                if "oneOf" in path or "anyOf" in path[:1]:
                    failed += 1
                    print(f"FAIL corpus line {n}: the best error of a {own} line is a union's: {e.message}", file=sys.stderr)
    if checked < 150:
        failed += 1
        print(f"FAIL only {checked} corpus lines checked", file=sys.stderr)
    version = "?"
    try:
        from importlib.metadata import version as v
        version = v("jsonschema")
    except Exception:
        pass
    print(f"python-jsonschema {version} (Draft 2020-12): {checked} corpus lines agree, {left} left to rules in words")
    if failed:
        print(f"{failed} failures", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
