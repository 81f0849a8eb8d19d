#!/usr/bin/env bash
# A small bare JAX repository of the commits from a release tag to a later commit, to carry where there is no network
# (the borrowed TPU machine: scripts/tpu-check.sh). Real commits, real hashes: every commit after the branch point of
# the tag and the commit, their trees whole (blobs over 3 MB left out: a few images), the commits at the edge marked
# shallow. `git log`, `git show` and `git archive ... jax` work on it as on a full clone.
# Usage: scripts/jax-range-repo.sh MIRROR [TAG] [COMMIT] [OUT]   (defaults: jax-v0.10.2 0145058aa .jax-repo.git)
set -euo pipefail
MIRROR=$1 TAG=${2:-jax-v0.10.2} COMMIT=${3:-0145058aa} OUT=${4:-.jax-repo.git}
SRC=(git --git-dir "$MIRROR")
FULL=$("${SRC[@]}" rev-parse --verify "$COMMIT^{commit}")
BASE=$("${SRC[@]}" merge-base "$TAG" "$FULL")
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
"${SRC[@]}" rev-list --boundary "$FULL" "$TAG" "^$BASE" > "$WORK/revs"
sed -n 's/^-//p' "$WORK/revs" > "$WORK/edge"
{ "${SRC[@]}" rev-list --objects --missing=allow-any "$FULL" "$TAG" "^$BASE" | cut -d' ' -f1
  while read -r c; do echo "$c"; "${SRC[@]}" ls-tree -r -t "$c" | awk '{print $3}'; done < "$WORK/edge"
} | sort -u | "${SRC[@]}" cat-file --batch-check='%(objectname) %(objecttype) %(objectsize)' \
  | awk '$2 != "missing" && ($2 != "blob" || $3 < 3000000) {print $1}' > "$WORK/objects"
rm -rf "$OUT.tmp" && git init -q --bare "$OUT.tmp"
"${SRC[@]}" pack-objects -q "$OUT.tmp/objects/pack/pack" < "$WORK/objects" > /dev/null
cp "$WORK/edge" "$OUT.tmp/shallow"
git --git-dir "$OUT.tmp" update-ref refs/heads/main "$FULL"
git --git-dir "$OUT.tmp" update-ref "refs/tags/$TAG" "$("${SRC[@]}" rev-parse "$TAG")"
git --git-dir "$OUT.tmp" remote add origin https://github.com/jax-ml/jax
rm -rf "$OUT" && mv "$OUT.tmp" "$OUT"
echo "$OUT: $(git --git-dir "$OUT" rev-list --first-parent --count "$TAG..main") first-parent commits from $TAG to ${FULL:0:10}, $(du -sh "$OUT" | cut -f1)"
