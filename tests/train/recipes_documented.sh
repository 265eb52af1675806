#!/usr/bin/env bash
# Every recipe ddp-train registers (as its --help lists them) has a row in the
# recipes table of docs/training.md, and every row names a registered recipe.
# usage: recipes_documented.sh DDP_TRAIN DOCS_TRAINING_MD
set -euo pipefail
train=$1 doc=$2
registered=$("$train" --help | sed -n 's/.*the recipe to train: //p' | tr -d ' ' | tr ',' '\n' | sort)
[ -n "$registered" ] || { echo "FAIL: no recipe list in ddp-train --help"; exit 1; }
documented=$(awk '/^## /{on = ($0 == "## Recipes")} on' "$doc" | grep '^| `' | cut -d'|' -f2 | grep -o '`[a-z0-9-]*`' | tr -d '`' | sort -u)
if [ "$registered" != "$documented" ]; then
  echo "FAIL: registered and documented recipes differ (< registered, > in $doc):"
  diff <(echo "$registered") <(echo "$documented") || true
  exit 1
fi
echo "recipes documented: $(echo "$registered" | wc -l)"
