#!/bin/sh
# Damages one record of a database packed by `stoker pack`: overwrites the first byte of its
# "STKR" magic, in the record and in any stale copy LMDB keeps of it in freed pages, so that
# the record is bad whether or not the format checks payload checksums. The record is the
# INDEX-th magic in data.mdb (default 10). Prints how many copies were changed.
# Usage: damage_record.sh DATABASE_DIR [INDEX]
set -eu
mdb="$1/data.mdb"
offsets=$(LC_ALL=C grep -obUa STKR "$mdb" | cut -d: -f1)
target=$(echo "$offsets" | sed -n "${2:-10}p")
[ -n "$target" ] || { echo "damage_record.sh: fewer than ${2:-10} records in $mdb" >&2; exit 1; }
# A record's first 24 bytes: its header (with the checksum in version 2) and payload start.
header() { od -An -v -tx1 -j "$1" -N 24 "$mdb" | tr -d ' \n'; }
want=$(header "$target")
damaged=0
for o in $offsets; do
  if [ "$(header "$o")" = "$want" ]; then
    printf 'X' | dd of="$mdb" bs=1 seek="$o" conv=notrunc 2> /dev/null
    damaged=$((damaged + 1))
  fi
done
echo "$damaged"
