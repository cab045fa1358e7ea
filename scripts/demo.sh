#!/usr/bin/env bash
# The main job on the embedded SQLite store and the process agent host:
# a controller lease (acquire, renew, resume, a stale-fence attempt rejected), then a scripted
# reviewer asked for a review through a receipt (reserved -> pending -> completed) and closed at
# its cursor, the lease released, an MCP client driving `corral mcp` (its own controller, mcp-demo),
# the event log and the drawn machines.
# Everything lives in .demo/ (recreated each run).
set -euo pipefail
cd "$(dirname "$0")/.."

export CORRAL_HOME="$PWD/.demo/home"
unset CORRAL_STORE CORRAL_CONTROLLER
rm -rf .demo
mkdir -p .demo

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
sha() { printf '%s' "$1" | sha256sum | cut -d' ' -f1; }
skip() { printf -- '-> skipped: %s\n' "$*"; }

# What the optional steps need, found once. Bubblewrap must really start a sandbox (installed is not
# enough: a kernel or container may refuse the namespaces); corral never validates unsandboxed, so
# without it the sandboxed validation and the writer-lane plan (which validates) are skipped.
if command -v bwrap >/dev/null 2>&1 \
  && bwrap --unshare-all --die-with-parent --new-session --ro-bind / / --proc /proc --dev /dev true >/dev/null 2>&1; then
  sandbox=yes
else
  sandbox=no
fi
if command -v dot >/dev/null 2>&1 && dot -V >/dev/null 2>&1; then graphviz=yes; else graphviz=no; fi
[ "$sandbox" = yes ] || echo "note: Bubblewrap is missing or cannot start a sandbox here: the sandboxed steps are skipped (apt-get install bubblewrap)"
[ "$graphviz" = yes ] || echo "note: Graphviz is not installed: the review pack and SVG drawings are skipped (apt-get install graphviz)"

step "validate the built-in machines"
corral validate

step "acquire the controller lease for 'demo' (ttl 300 s)"
corral controller acquire --controller demo --ttl-seconds 300 \
  --authority-ref "ISSUE-2: the spine" --authority-sha256 "$(sha 'ISSUE-2: the spine')"
# Keep the generation-1 credential, as corral requires of any credential: a 0600 file in a 0700 directory.
mkdir -m 700 .demo/kept
cp -p "$CORRAL_HOME/credentials/demo.json" .demo/kept/old-credential.json

step "renew it (same fence, later expiry)"
corral controller renew --controller demo

step "resume it (new token, generation 2: the old credential is now stale)"
corral controller resume --controller demo

step "a stale-fence attempt: renew with the generation-1 credential"
set +e
corral controller renew --controller demo --credential .demo/kept/old-credential.json
status=$?
set -e
if [ "$status" -ne 4 ]; then
  echo "expected the stale credential to be refused with exit status 4, got $status" >&2
  exit 1
fi
echo "-> refused with exit status $status, as it must be"

step "the leases (no secrets shown)"
corral controller list

step "a project for the reviewer to read"
mkdir -p .demo/project/src
printf 'def add(a, b):\n    return a + b\n' > .demo/project/src/calc.py
printf '# calc\nA tiny project for the demo reviewer.\n' > .demo/project/README.md

step "start a scripted reviewer in it (process host: a supervised slot in the state home)"
corral reviewer start --controller demo --name reviewer1 --kind script --cwd "$PWD/.demo/project"
corral agents

step "relay a prompt with a receipt (reserved -> pending: the agent took it at before_seq + 1)"
token=$(echo "please review this project" | corral relay reviewer1 --controller demo --json \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["receipt"]["token"])')
corral receipts

step "a second prompt while that receipt is unresolved: refused"
set +e
corral relay reviewer1 --controller demo --text "and another thing"
status=$?
set -e
[ "$status" -eq 4 ] || { echo "expected receipt_outstanding (exit 4), got $status" >&2; exit 1; }
echo "-> refused with exit status $status (receipt_outstanding)"

step "collect exactly its result (pending -> completed at after_seq + 1)"
corral collect --controller demo --receipt "$token"
corral receipts --all

step "close the reviewer at the cursor it settled at"
seq=$(corral agents --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["agents"][0]["seq"])')
corral reviewer close reviewer1 --controller demo --expect-seq "$seq"
corral status

step "a repository with a validation recipe, and a linked worktree for a writer lane"
export GIT_AUTHOR_NAME=demo GIT_AUTHOR_EMAIL=demo@example.invalid GIT_COMMITTER_NAME=demo \
  GIT_COMMITTER_EMAIL=demo@example.invalid
git init -q -b main .demo/repo
mkdir -p .demo/repo/src .demo/repo/.corral
printf 'def add(a, b):\n    return a + b\n' > .demo/repo/src/calc.py
cat > .demo/repo/.corral/validate.yaml <<'YAML'
validations:
  - name: compiles
    argv: [python3, -c, "import ast, pathlib; [ast.parse(p.read_text()) for p in pathlib.Path('src').rglob('*.py')]"]
  - name: no-network
    argv: [python3, -c, "import socket; s = socket.socket(); s.settimeout(2); assert s.connect_ex(('1.1.1.1', 80)) != 0"]
YAML
git -C .demo/repo add . && git -C .demo/repo commit -q -m "demo project"
git -C .demo/repo worktree add -q -b demo-lane ../lane
corral preflight "$PWD/.demo/lane"
field() { corral preflight "$PWD/.demo/lane" --json | python3 -c "import json, sys; print(json.load(sys.stdin)['$1'])"; }
base=$(field head)

step "start a scripted writer that owns src/ (git preflight and scope checks run first)"
# Its runs are confined by Bubblewrap (writable: src/ only); without a usable one a writer starts only
# by an operator's recorded choice, shown by status.
confinement=()
[ "$sandbox" = yes ] || confinement=(--unconfined --reason "the demo on a machine without a usable Bubblewrap")
corral writer start --controller demo --name writer1 --kind script --worktree "$PWD/.demo/lane" \
  --branch demo-lane --base-commit "$base" --expect-head "$base" --expect-status "$(field status_sha256)" \
  --own src --lock .corral --purpose "demo feature" --ticket DEMO-1 \
  --authority-ref "ISSUE-4" --authority-sha256 "$(sha 'ISSUE-4')" ${confinement[@]+"${confinement[@]}"}
corral scopes check src/new.py --worktree "$PWD/.demo/lane" || echo "-> src/new.py is owned by writer1: refused for any other lane"

step "ask the writer to edit its owned files"
corral ask writer1 --controller demo --text "write src/feature.py def feature():
append src/feature.py     return 42"

step "validate the lane in the sandbox (no network, read-only snapshot, commands from the base commit)"
if [ "$sandbox" = yes ]; then
  corral writer verify writer1 --controller demo
else
  skip "no usable Bubblewrap, and corral never runs validations unsandboxed (apt-get install bubblewrap)"
fi

step "release the lane at the HEAD and status the coordinator sees now"
before=$(field status_sha256)
seq=$(corral agents --json | python3 -c 'import json, sys; print([a for a in json.load(sys.stdin)["agents"] if a["name"] == "writer1"][0]["seq"])')
corral writer release writer1 --controller demo --expect-seq "$seq" --expect-head "$(field head)" \
  --expect-status "$before" --checkpoint-ref "uncommitted work in .demo/lane" \
  --checkpoint-sha256 "$(sha "$before")"
after=$(field status_sha256)
git -C .demo/lane status --short
if [ "$before" = "$after" ]; then
  echo "-> the worktree is untouched by the release: status digest still ${after:0:16}…, the edit is still there"
else
  echo "the release changed the worktree ($before -> $after)" >&2; exit 1
fi

step "release with a checkpoint"
corral controller release --controller demo \
  --checkpoint-ref "demo checkpoint" --checkpoint-sha256 "$(sha 'demo checkpoint')"

step "an MCP client: corral mcp over stdio answering a scripted coordinator (list tools, acquire, status, renew, release)"
python3 scripts/mcp_demo.py

step "the event log"
corral events

step "plans: the review, batch-review and writer-lane recipes submitted together, run durably with live progress"
git -C .demo/repo worktree add -q -b plan-lane ../plan-lane
mkdir -p .demo/plans
cat > .demo/plans/review.yaml <<YAML
plan: demo-review
recipe: review
controller: demo-plans
inputs:
  cwd: $PWD/.demo/project
  prompt: please review this project
  kind: script
  authority_ref: "ISSUE-5: plans"
  authority_sha256: "$(sha 'ISSUE-5: plans')"
YAML
cat > .demo/plans/writer-lane.yaml <<YAML
plan: demo-writer-lane
recipe: writer-lane
controller: demo-plans
inputs:
  worktree: $PWD/.demo/plan-lane
  branch: plan-lane
  owned_scopes: [src/plans]
  locked_scopes: [.corral]
  prompt: |-
    write src/plans/planned.py def planned():
    append src/plans/planned.py     return "from a plan"
  kind: script
  purpose: a module written by a plan
  ticket_ref: DEMO-5
  authority_ref: "ISSUE-5: plans"
  authority_sha256: "$(sha 'ISSUE-5: plans')"
YAML
cat > .demo/plans/batch-review.yaml <<YAML
plan: demo-batch-review
recipe: batch-review
controller: demo-plans
inputs:
  cwd: $PWD/.demo/project
  prompt_a: review this project for correctness
  prompt_b: review this project for style
  kind: script
  mode: first
  authority_ref: "ISSUE-5: plans"
  authority_sha256: "$(sha 'ISSUE-5: plans')"
YAML
plans=(.demo/plans/review.yaml .demo/plans/batch-review.yaml .demo/plans/writer-lane.yaml)
if [ "$sandbox" != yes ]; then
  plans=(.demo/plans/review.yaml .demo/plans/batch-review.yaml)
  skip "the writer-lane plan: its verify step needs a usable Bubblewrap"
fi
corral run "${plans[@]}"
echo "-> run it again: the same plan ids with the same content are the same plans, nothing runs twice"
corral run "${plans[@]}" >/dev/null && corral plans list --all

step "the review pack: every machine and recipe drawn, with their guards and effects, in one HTML page"
if [ "$graphviz" = yes ]; then
  corral review-pack --out .demo/review-pack
else
  skip "the review pack draws with Graphviz, which is not installed (apt-get install graphviz)"
fi

step "the receipt machine (Mermaid; paste into a GitHub comment to see it drawn)"
corral draw receipt
if [ "$graphviz" = yes ]; then
  for machine in controller reviewer receipt writer; do
    corral draw "$machine" --format svg --out ".demo/$machine.svg"
  done
else
  skip "the SVG drawings .demo/*.svg need Graphviz (apt-get install graphviz); Mermaid above needs nothing"
fi

step "done: state home in .demo/home, database .demo/home/corral.db"
