# shellcheck shell=bash
# Sourced by scripts/demo.sh: the demo's local signing key.
#
# demo_key VENV OUT prints the path of the demo's private key, DIR/fasttrack-demo-key, where DIR is
# demo-keys/ next to the run folder OUT (runs/demo -> runs/demo-keys/). The first run creates the
# Ed25519 pair (DIR/fasttrack-demo-key, mode 0600, and DIR/fasttrack-demo-key.pub); later runs, and
# `--force` runs that replace OUT, reuse it. It is a local demo key, not anyone's identity: it shows
# that the bundle was not changed after this machine signed it, nothing more.
demo_key() {
  local venv="$1" out="$2"
  local dir key
  dir="$(dirname "$out")/demo-keys"
  key="$dir/fasttrack-demo-key"
  if [ -f "$key" ] && [ ! -f "$key.pub" ]; then
    # the public half was lost: derive it again from the private key
    "$venv/bin/fasttrack" keys show "$key" | sed 's/^[^ ]*  *//' >"$key.pub" || return 1
  elif [ ! -f "$key" ] && [ -f "$key.pub" ]; then
    echo "demo key: $key.pub exists without its private key $key; remove $dir to make a new pair" >&2
    return 1
  elif [ ! -f "$key" ]; then
    "$venv/bin/fasttrack" keys generate -o "$dir" --name fasttrack-demo-key \
      --comment "fasttrack-demo-key (local demo key made by scripts/demo.sh)" >&2 || return 1
    echo "demo key: created the local demo signing key $key (reused by later demo runs)" >&2
  fi
  printf '%s\n' "$key"
}
