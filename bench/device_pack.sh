#!/usr/bin/env bash
# Packs what bench/scale.py needs on a machine with no package manager and no network (a lent
# many-core machine): the static release binary, and nginx and wrk with every library they load
# (the loader and libc too, so the host's own do not matter), started through small wrappers.
#
#   bench/device_pack.sh [DIR] [OLD_EBTOP]      (DIR defaults to .devbin; git-ignore it)
#
# Then, there: bench/scale.py --ebtop DIR/ebtop [--ebtop-old DIR/ebtop-old] --nginx DIR/nginx
# --wrk DIR/wrk ... (bench/notes.md, "Many cores"). Needs nginx and wrk installed here.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.devbin}
mkdir -p "$dir/lib"
cp "$(scripts/build-release)" "$dir/ebtop"
if [ -n "${2:-}" ]; then cp "$2" "$dir/ebtop-old"; fi
for prog in nginx wrk; do
  path=$(command -v "$prog" || true)
  [ -n "$path" ] || { echo "$prog is not installed here (apt-get install $prog)" >&2; exit 1; }
  cp "$path" "$dir/$prog.bin"
  # Every library ldd resolves, and the loader itself.
  ldd "$path" | awk '/=> \// {print $3} /^\s*\/.*ld-linux/ {print $1}' | while read -r lib; do
    cp -L "$lib" "$dir/lib/"
  done
  cat >"$dir/$prog" <<EOF
#!/bin/sh
d=\$(dirname "\$(readlink -f "\$0")")
exec "\$d/lib/$(basename "$(ldd "$path" | awk '/ld-linux/ {print $1}')")" --library-path "\$d/lib" "\$d/$prog.bin" "\$@"
EOF
  chmod +x "$dir/$prog"
done
"$dir/nginx" -v
"$dir/wrk" --version | head -1 || true
du -sh "$dir"
