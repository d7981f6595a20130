#!/usr/bin/env bash
# On the GPU machine: join the pieces (copied to $ACC by each transfer), check them, install the wheels into $SITE,
# finish the checkpoint (its tokenizer is trained there: `tokenizers` is in the image, not on the dev machine).
#   bash bench/gpu/install.sh        (after every piece of bench/gpu/.pieces has been copied to $ACC)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ACC=${ACC:-/tmp/acc}
SITE=${SITE:-/tmp/site}
MODELS=${MODELS:-/tmp/models}
t0=$(date +%s)
(cd "$ACC" && sha256sum -c --quiet MANIFEST)
mkdir -p /tmp/payload-x && cat "$ACC"/p* | tar -C /tmp/payload-x -xf -
P=/tmp/payload-x/payload
(cd "$P/wheels" && sha256sum -c --quiet ../SHA256SUMS)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$P"/wheels/*.whl
mkdir -p "$MODELS" && cp -r "$P/models/." "$MODELS/"
SITE=$SITE python3 "$HERE/make_checkpoint.py" tokenizer "$MODELS"
echo "installed in $(( $(date +%s) - t0 )) s: $(ls "$P"/wheels | wc -l) wheels into $SITE; models at $MODELS: $(ls "$MODELS" | tr "\n" " ")"
