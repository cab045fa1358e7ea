#!/usr/bin/env bash
# The main job on the embedded SQLite store: a scripted controller lifecycle.
# acquire -> renew -> resume (new fence) -> a stale-fence attempt, rejected -> release,
# then the event log and the drawn machine. Everything lives in .demo/ (recreated each run).
set -euo pipefail
cd "$(dirname "$0")/.."

export CORRAL_HOME="$PWD/.demo/home"
unset CORRAL_STORE CORRAL_CONTROLLER
rm -rf .demo
mkdir -p .demo

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
sha() { printf '%s' "$1" | sha256sum | cut -d' ' -f1; }

step "validate the built-in machines"
corral validate

step "acquire the controller lease for 'demo' (ttl 60 s)"
corral controller acquire --controller demo --ttl 60 \
  --authority-ref "ISSUE-2: the spine" --authority-sha256 "$(sha 'ISSUE-2: the spine')"
cp "$CORRAL_HOME/credentials/demo.json" .demo/old-credential.json   # keep the generation-1 credential

step "renew it (same fence, later expiry)"
corral controller renew --controller demo

step "resume it (new token, generation 2: the old credential is now stale)"
corral controller resume --controller demo

step "a stale-fence attempt: renew with the generation-1 credential"
set +e
corral controller renew --controller demo --credential .demo/old-credential.json
status=$?
set -e
if [ "$status" -ne 4 ]; then
  echo "expected the stale credential to be refused with exit status 4, got $status" >&2
  exit 1
fi
echo "-> refused with exit status $status, as it must be"

step "the leases (no secrets shown)"
corral controller list

step "release with a checkpoint"
corral controller release --controller demo \
  --checkpoint-ref "demo checkpoint" --checkpoint-sha256 "$(sha 'demo checkpoint')"

step "the event log"
corral events

step "the controller machine (Mermaid; paste into a GitHub comment to see it drawn)"
corral draw controller
if command -v dot >/dev/null 2>&1; then
  corral draw controller --format svg --out .demo/controller.svg
else
  echo "(install Graphviz to also get .demo/controller.svg)"
fi

step "done: state home in .demo/home, database .demo/home/corral.db"
