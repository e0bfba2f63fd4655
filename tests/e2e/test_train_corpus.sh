#!/usr/bin/env bash
# test_train_corpus.sh — tools/train/corpus.py's --number-copy phrases:
#  1. number_copy 0 draws exactly the dialogues of a generator built without it (the evaluation's
#     prompts do not move);
#  2. number_copy 1: every repeat/copy turn asks for a word run holding one number, the answer is
#     the phrase as the prompt gives it, and over 600 turns every number form appears (integer,
#     version, year range, power-of-two size, date, prefixed id) and nothing else does.
# Skips (77) without Debian's /usr/bin/python3 (make test does not need it).
set -u
cd "$(dirname "$0")/../.." || exit 1
PY=/usr/bin/python3
[ -x "$PY" ] || { echo "SKIP: no $PY"; exit 77; }
exec "$PY" - <<'PYEOF'
import re, sys
sys.path[:0] = ["tools/train"]
import corpus

words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"]
sents = ["The first sentence is here.", "Another one, with a comma and 2 digits 42."]
a = corpus.Dialogues(words, sents, 9)
b = corpus.Dialogues(words, sents, 9, number_copy=0.0)
assert [a.dialogue() for _ in range(300)] == [b.dialogue() for _ in range(300)], \
    "number_copy 0 changed the dialogues"

forms = {
    "integer": r"\d{1,6}",
    "version": r"\d(\.\d{1,2}){1,3}",
    "year range": r"(19[7-9]\d|20[0-3]\d)-(19[7-9]\d|20[0-6]\d)",
    "size": r"\d+(k|M|bit|ms| bytes)?",
    "date": r"(199\d|20[0-3]\d)-(0[1-9]|1[0-2])-(0[1-9]|[12]\d)",
    "id": r"(v|-|\+|0x|#)\d{1,5}",
}
seen = set()
g = corpus.Dialogues(words, sents, 4, number_copy=1.0)
for _ in range(600):
    user, answer = g.repeat()
    assert answer in user, (user, answer)
    nums = [w for w in re.split(r" (?!bytes)", answer) if any(c.isdigit() for c in w)]
    assert len(nums) == 1, (answer, nums)
    rest = answer.replace(nums[0], "").split()
    assert 2 <= len(rest) <= 7 and all(w.lower() in words for w in rest), answer
    hit = [k for k, rx in forms.items() if re.fullmatch(rx, nums[0])]
    assert hit, f"{nums[0]!r} is none of the number forms"
    seen.update(hit)
missing = set(forms) - seen
assert not missing, f"number forms never drawn: {missing}"
try:
    corpus.Dialogues(words, sents, 1, number_copy=1.5)
    sys.exit("FAIL: number_copy 1.5 accepted")
except ValueError as e:
    assert "number copy fraction" in str(e)
print("ok: number_copy 0 leaves the dialogues unchanged; 600 number phrases in all 6 forms")
PYEOF
