#!/usr/bin/env bash
# meshtrain plan (issue 28, docs/planner.md):
# - the rule book: every layout the planner lists for a small model on 4 and on 6 devices is
#   one `train --dry-run` accepts (exit 0) exactly when the planner says it fits (or is out
#   of memory), and refuses (exit 2) exactly when the planner says the engine refuses it;
# - memory: in fp32 the planner's bytes of the fullest rank, by category, equal what a run
#   of its own train command measures (`mem` in the log) on DP with ZeRO 0-3, HSDP, TP with
#   and without sequence parallelism, pipelines of each schedule and recomputation, hybrids;
# - output: the table, --json (nothing else on stdout), --explain, --svg, the counts;
# - bad input: an unknown cluster, a cluster file with a missing or negative field, a model
#   that fits no layout (the smallest memory and its layout named), contradicting flags.
source "$(dirname "$0")/lib.sh"
make_text "$T/text.txt"
$MT_BIN prepare --input "$T/text.txt" --out "$T/data" > /dev/null
MODEL=(--layers 4 --heads 4 --dim 32 --seq-len 16 --vocab 256)

# ---- the rule book: the planner's verdict against train's, layout by layout ----
# (and an untied model's pipelines on 4: post-validation searched, refused with ZeRO over copies)
for x in "4 8" "6 12" "4 8 --untie-embeddings --pp 2 --recompute none --micro-batch-size 1"; do
  read -r dev batch more <<< "$x"
  # shellcheck disable=SC2086
  $MT_BIN plan "${MODEL[@]}" --batch-size $batch --devices $dev --all --json --precision fp32 --data "$T/data" $more \
    > "$T/all$dev.jsonl"
  n=0 agree=0
  while IFS= read -r line; do
    verdict=$(echo "$line" | grep -o '"verdict": "[^"]*"' | cut -d'"' -f4)
    flags=$(echo "$line" | grep -o '"train_flags": "[^"]*"' | cut -d'"' -f4 | sed 's/^meshtrain train //')
    rc=0
    # shellcheck disable=SC2086
    $MT_BIN train $flags --dry-run < /dev/null > /dev/null 2> "$T/dry.err" || rc=$?
    case "$verdict" in
      fits|"out of memory") want=0 ;;
      *) want=2 ;;
    esac
    n=$((n + 1))
    if [ "$rc" -eq "$want" ]; then
      agree=$((agree + 1))
    else
      fail "$dev devices: plan says '$verdict', train --dry-run exits $rc: $flags ($(head -c 200 "$T/dry.err"))"
    fi
  done < "$T/all$dev.jsonl"
  fits=$(grep -c '"verdict": "fits"' "$T/all$dev.jsonl" || true)
  refused=$(grep -c '"fits": false' "$T/all$dev.jsonl" || true)
  [ "$n" -gt 50 ] && [ "$fits" -gt 20 ] && [ "$refused" -gt 20 ] && pass \
    || fail "$dev devices: only $n layouts ($fits fit, $refused not)"
  echo "rule book, $dev devices${more:+ ($more)}: $agree of $n layouts agree with train ($fits fit, $refused refused)"
done
# the untied pipelines: both with and without post-validation considered, each fitting pair
grep -q '"post_validate": true, "fits": true' "$T/all4.jsonl" && grep -q '"post_validate": false, "fits": true' \
  "$T/all4.jsonl" && pass || fail "untied pp 2: post-validation not searched both ways"
for f in "--post-validate:false" "--no-post-validate:true"; do
  $MT_BIN plan "${MODEL[@]}" --batch-size 8 --devices 4 --all --json --precision fp32 --untie-embeddings --pp 2 \
    ${f%%:*} > "$T/pv.jsonl" && ! grep -q "\"post_validate\": ${f#*:}" "$T/pv.jsonl" && [ -s "$T/pv.jsonl" ] && pass \
    || fail "plan ${f%%:*} lists layouts with post_validate ${f#*:}"
done

# ---- memory: the plan's fullest rank against a run of its own command ----
mem_of() { # json-line category -> the plan's bytes
  echo "$1" | grep -o "\"memory_bytes\": {[^}]*}" | grep -o "\"$2\": [0-9]*" | cut -d' ' -f2
}
measured() { # log-line rank category -> the run's bytes
  echo "$1" | grep -o '"mem": \[[^]]*\]' | grep -o "\"$3\": [0-9]*" | sed -n "$(($2 + 1))p" | cut -d' ' -f2
}
while IFS='|' read -r what ranks lay; do
  # shellcheck disable=SC2086
  line=$($MT_BIN plan "${MODEL[@]}" --batch-size 8 --devices $ranks $lay --precision fp32 --json --top 1 \
         --data "$T/data" < /dev/null) || { fail "plan $what: exit $?"; continue; }
  flags=$(echo "$line" | grep -o '"train_flags": "[^"]*"' | cut -d'"' -f4 | sed 's/^meshtrain train //')
  rank=$(echo "$line" | grep -o '"mem_rank": [0-9]*' | cut -d' ' -f2)
  # shellcheck disable=SC2086
  $MT_BIN train $flags --steps 2 --threads 1 --eval-every 0 --log-every 0 --log-json "$T/m.jsonl" \
    < /dev/null > "$T/m.out" 2>&1 || { fail "$what: train exits $?: $(tail -2 "$T/m.out")"; continue; }
  log=$(tail -1 "$T/m.jsonl")
  ok=1 report=""
  for cat in params grads optimizer activations; do
    p=$(mem_of "$line" $cat) m=$(measured "$log" "$rank" $cat)
    report="$report $cat $p/$m"
    [ "$p" = "$m" ] || ok=0
  done
  # the fullest rank: no rank holds more (of the four categories) than the plan's
  peak=$(( $(mem_of "$line" params) + $(mem_of "$line" grads) + $(mem_of "$line" optimizer) + $(mem_of "$line" activations) ))
  for ((r = 0; r < ranks; r++)); do
    sum=$(( $(measured "$log" $r params) + $(measured "$log" $r grads) + $(measured "$log" $r optimizer) + $(measured "$log" $r activations) ))
    [ "$sum" -le "$peak" ] || { ok=0; report="$report; rank $r holds $sum > $peak"; }
  done
  [ $ok = 1 ] && pass || fail "memory $what (rank $rank, plan/measured):$report"
  echo "memory $what: rank $rank$report"
done <<'EOF'
one rank|1|--micro-batch-size 2 --recompute none
one rank, recompute attn|1|--micro-batch-size 4 --recompute attn
DDP|2|--dp 2 --zero 0 --micro-batch-size 2 --recompute none
ZeRO-1|2|--dp 2 --zero 1 --micro-batch-size 2 --recompute none
ZeRO-2|2|--dp 2 --zero 2 --micro-batch-size 1 --recompute full
FSDP|2|--dp 2 --zero 3 --micro-batch-size 2 --recompute none
HSDP|4|--dp 4 --zero 3 --shard-size 2 --micro-batch-size 1 --recompute none
TP|2|--tp 2 --micro-batch-size 4 --recompute none --no-sequence-parallel
TP + SP|2|--tp 2 --micro-batch-size 2 --recompute attn --sequence-parallel
PP 1f1b|2|--pp 2 --schedule 1f1b --micro-batch-size 1 --recompute none
PP gpipe, full recompute|2|--pp 2 --schedule gpipe --micro-batch-size 2 --recompute full
PP interleaved|2|--pp 2 --schedule interleaved --virtual-stages 2 --micro-batch-size 1 --recompute none
PP zb|2|--pp 2 --schedule zb --micro-batch-size 1 --recompute attn
PP zb2|2|--pp 2 --schedule zb2 --micro-batch-size 1 --recompute none
PP 1F1B-I, end chunks of no block|2|--pp 2 --schedule interleaved --virtual-stages 3 --stage-layers 0,1,1,1,1,0 --micro-batch-size 1 --recompute none
dp x pp ZeRO-1|4|--dp 2 --pp 2 --zero 1 --schedule 1f1b --micro-batch-size 1 --recompute none
dp x tp x pp|8|--dp 2 --tp 2 --pp 2 --zero 0 --schedule 1f1b --micro-batch-size 1 --recompute none --sequence-parallel
EOF

# ---- output ----
$MT_BIN plan --model gpt2 --devices 16 --batch-size 64 --top 3 --explain --svg "$T/p.svg" --pp 2 > "$T/table.out"
grep -q "^  #1  meshtrain train --data DATA --layers 12 --heads 12 --dim 768" "$T/table.out" && pass || fail "no command: $(head -5 "$T/table.out")"
grep -q "^considered [0-9]* layouts in" "$T/table.out" && pass || fail "no count line"
grep -q "pipeline bubble" "$T/table.out" && grep -q "activations" "$T/table.out" && pass || fail "--explain"
grep -q "<svg" "$T/p.svg" && pass || fail "--svg drew nothing"
rows=$(grep -c "^  [0-9] " "$T/table.out" || true)
[ "$rows" -eq 3 ] && pass || fail "--top 3 printed $rows rows"
$MT_BIN plan --model gpt2 --devices 8 --batch-size 64 --json --top 4 > "$T/j.out"
[ "$(wc -l < "$T/j.out")" -eq 4 ] && ! grep -qv '^{.*}$' "$T/j.out" && pass || fail "--json: $(head -c 300 "$T/j.out")"
for key in dp tp pp zero shard_size schedule virtual_stages micro_batch_size recompute sequence_parallel step_s \
           tokens_per_s tflops_per_device mfu mem_peak_bytes fits train_flags breakdown compute bubble tp_exposed \
           dp_exposed pp_send_recv optimizer activations; do
  grep -q "\"$key\": " "$T/j.out" && pass || fail "--json lacks $key"
done
s1=$(sed -n 1p "$T/j.out" | grep -o '"step_s": [0-9.e+-]*' | cut -d' ' -f2)
s4=$(sed -n 4p "$T/j.out" | grep -o '"step_s": [0-9.e+-]*' | cut -d' ' -f2)
awk -v a="$s1" -v b="$s4" 'BEGIN { exit !(a <= b) }' && pass || fail "not fastest first: $s1 then $s4"

# ---- this machine: calibrate writes a cluster file plan reads ----
$MT_BIN calibrate --out "$T/cal.json" --threads 1 > "$T/cal.out" 2>&1 || fail "calibrate: $(tail -2 "$T/cal.out")"
python3 - "$T/cal.json" <<'PY' && pass || fail "the calibration file: $(cat "$T/cal.json")"
import json, sys
j = json.load(open(sys.argv[1]))
d = j["device"]
assert j["name"] == "this-machine" and j["devices_per_node"] >= 1 and d["threads"] == 1
for v in (d["peak_tflops"]["fp32"], d["memory_bw_gbs"], d["elementwise_bw_gbs"], j["intra_node"]["bw_gbs"],
          j["intra_node"]["latency_us"], j["efficiency"]["gemm_half_dim"], j["efficiency"]["attention_forward"]):
    assert v > 0, v
assert 0.001 < d["peak_tflops"]["fp32"] < 100, d
PY
$MT_BIN plan "${MODEL[@]}" --batch-size 8 --devices 2 --cluster this-machine --calibration "$T/cal.json" \
  --precision fp32 --top 2 > "$T/tm.out" && grep -q "devices of this-machine" "$T/tm.out" && pass \
  || fail "plan on the calibration: $(head -3 "$T/tm.out")"
# train --plan: per stage the fullest and emptiest rank, and the predicted step on the calibration
$MT_BIN train --data "$T/data" "${MODEL[@]}" --batch-size 8 --micro-batch-size 1 --dp 2 --pp 2 --threads 1 --plan \
  --calibration "$T/cal.json" > "$T/tp.out"
[ "$(grep -c '^ *[01] \(fullest\|emptiest\) ' "$T/tp.out")" -eq 4 ] && grep -q "^predicted step on this-machine" "$T/tp.out" \
  && pass || fail "train --plan: $(cat "$T/tp.out")"
full0=$(awk '$1 == 0 && $2 == "fullest" { print $4 + $5 + $6 + $7 }' "$T/tp.out")
ranks0=$($MT_BIN train --data "$T/data" "${MODEL[@]}" --batch-size 8 --micro-batch-size 1 --dp 2 --pp 2 --threads 1 \
  --plan-ranks | awk 'NR <= 2 { s = $5 + $7 + $9 + $11; if (s > m) m = s } END { print m }')
[ "$full0" = "$ranks0" ] && pass || fail "train --plan's fullest rank of stage 0 ($full0) is not --plan-ranks' ($ranks0)"
expect_bad_input "calibrate: --threads 0" $MT_BIN calibrate --out "$T/c2.json" --threads 0
expect_bad_input "calibrate: a directory that is not there" $MT_BIN calibrate --out "$T/no/such/c.json"
expect_bad_input "--calibration without this-machine" $MT_BIN plan --model gpt2 --devices 8 --calibration "$T/cal.json"

# ---- bad input: one line, exit 2 ----
expect_bad_input "unknown cluster" $MT_BIN plan --model gpt2 --devices 8 --cluster tpu-v9
python3 - "$T" <<'PY'
import json, sys, re
t = sys.argv[1]
base = open("clusters/a100-80g.json").read()
j = json.loads(base)
del j["inter_node"]["bw_gbs"]
json.dump(j, open(t + "/missing.json", "w"))
j = json.loads(base)
j["device"]["memory_bytes"] = -1
json.dump(j, open(t + "/negative.json", "w"))
PY
expect_bad_input "a cluster file missing a field" $MT_BIN plan --model gpt2 --devices 8 --cluster "$T/missing.json"
grep -q "inter_node.bw_gbs" "$T/err" && pass || fail "the missing field is not named: $(cat "$T/err")"
expect_bad_input "a negative field" $MT_BIN plan --model gpt2 --devices 8 --cluster "$T/negative.json"
grep -q "memory_bytes" "$T/err" && pass || fail "the negative field is not named: $(cat "$T/err")"
expect_bad_input "a cluster file that is not there" $MT_BIN plan --model gpt2 --devices 8 --cluster "$T/none.json"
expect_bad_input "a model that fits no layout" $MT_BIN plan --layers 96 --heads 96 --dim 12288 --seq-len 2048 \
  --vocab 51200 --batch-size 8 --devices 8
grep -q "smallest peak is .* GB (dp" "$T/err" && pass || fail "no smallest memory: $(cat "$T/err")"
expect_bad_input "degrees that do not make the devices" $MT_BIN plan --model gpt2 --devices 8 --dp 2 --tp 2 --pp 1
expect_bad_input "sequence parallel both ways" $MT_BIN plan --model gpt2 --devices 8 --sequence-parallel --no-sequence-parallel
expect_bad_input "post-validation both ways" $MT_BIN plan --model gpt2 --devices 8 --untie-embeddings --post-validate \
  --no-post-validate
expect_bad_input "--model and --layers" $MT_BIN plan --model gpt2 --layers 4 --devices 8
expect_bad_input "neither --nodes nor --devices" $MT_BIN plan --model gpt2
expect_bad_input "an unknown precision" $MT_BIN plan --model gpt2 --devices 8 --precision fp8
expect_bad_input "ZeRO with one dp rank" $MT_BIN plan --model gpt2 --devices 8 --tp 4 --pp 2 --zero 1
finish
