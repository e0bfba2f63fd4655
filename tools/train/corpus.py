"""corpus.py — training text for the demo model: natural English from Debian's offline files,
and seeded synthetic ChatML dialogues.

Natural text (whatever of these the machine has; the file list is sorted, so the result depends
only on the installed packages):
  /usr/share/common-licenses/*, /usr/share/doc/*/copyright, man pages in
  /usr/share/man/man{1,5,7,8} (roff stripped by a crude converter below), and fortune
  databases under /usr/share/games/fortunes if installed.
Paragraphs are kept when they are plain ASCII prose, then de-duplicated.

Dialogues (one `random.Random(seed)` drives everything): repeat/copy a phrase, write a phrase's
words one per line, reverse a word list, add / subtract numbers of up to 3 digits, count items,
continue a sequence, answer from a short passage, plus a few fixed chit-chat turns. Every
dialogue is a list of (text, weight) segments; weight 1 marks the assistant's answer and its
<|im_end|>, 0 the rest.

Held-out split: addition / subtraction operand pairs with held_out(a, b) true never appear in
training; the evaluation draws its arithmetic prompts from them only.
"""

import glob
import gzip
import hashlib
import os
import random
import re

SYSTEM = "You are a helpful assistant."
THINK_EMPTY = "<think>\n\n</think>\n\n"

NAMES = ["Anna", "Ben", "Clara", "David", "Emma", "Felix", "Grace", "Hugo", "Iris", "Jack",
         "Kate", "Leo", "Mia", "Noah", "Olga", "Paul", "Rosa", "Sam", "Tina", "Victor", "Wendy",
         "Yusuf", "Zoe", "Omar", "Lena", "Marco", "Nina", "Oscar", "Lucy", "Tom"]
CITIES = ["Paris", "London", "Berlin", "Madrid", "Rome", "Lisbon", "Vienna", "Prague", "Oslo",
          "Dublin", "Athens", "Warsaw", "Tokyo", "Cairo", "Lima", "Boston", "Denver", "Sydney",
          "Toronto", "Chicago", "Seattle", "Munich", "Geneva", "Milan"]
COLORS = ["red", "blue", "green", "yellow", "black", "white", "orange", "purple", "brown",
          "pink", "grey", "silver"]
ANIMALS = ["cat", "dog", "horse", "rabbit", "parrot", "turtle", "hamster", "goat", "fish",
           "mouse", "duck", "pony"]
JOBS = ["teacher", "doctor", "baker", "pilot", "farmer", "nurse", "lawyer", "painter",
        "writer", "chef", "driver", "engineer", "singer", "builder"]
FOODS = ["apples", "bread", "rice", "soup", "cheese", "pasta", "fish", "salad", "cake",
         "eggs", "beans", "pizza"]
THINGS = ["apple", "book", "chair", "cup", "pen", "lamp", "key", "ball", "coin", "shoe",
          "box", "stone", "leaf", "star", "spoon", "hat", "card", "bell", "ring", "shell"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]

CHIT_CHAT = [
    ("Hello!", "Hello! How can I help you today?"),
    ("Hi", "Hi! What can I do for you?"),
    ("Who are you?", "I am a small demo model served by deltad."),
    ("What can you do?", "I can repeat text, reverse a list of words, add and subtract numbers, "
     "count items, continue a sequence and answer questions about a short passage."),
    ("Thank you!", "You are welcome!"),
    ("Thanks.", "You are welcome!"),
    ("Good morning.", "Good morning! How can I help you?"),
    ("How are you?", "I am fine, thank you. How can I help you?"),
    ("Goodbye!", "Goodbye! Have a nice day."),
]


# ---------------------------------------------------------------------------------------------
# natural text

_ROFF_ESC = [(r"\\f\[[^\]]*\]", ""), (r"\\f\(..", ""), (r"\\f.", ""), (r"\\\(em", "-"),
             (r"\\\(en", "-"), (r"\\\(aq", "'"), (r"\\\(lq|\\\(rq|\\\(dq", '"'),
             (r"\\\(.." , ""), (r"\\\[[^\]]*\]", ""), (r"\\-", "-"), (r"\\e", "\\"),
             (r"\\&", ""), (r"\\ ", " "), (r"\\[|^/,%:]", ""), (r"\\\*\(..", ""),
             (r"\\\*.", ""), (r"\\s[-+]?\d", ""), (r"\\c", ""), (r"\\\"", "")]
_ROFF_RE = [(re.compile(a), b.replace("\\", "\\\\")) for a, b in _ROFF_ESC]


def _roff_paragraphs(src):
    paras, cur = [], []

    def flush():
        if cur:
            paras.append(" ".join(cur))
            cur.clear()

    for line in src.splitlines():
        if line.startswith((".", "'")):
            m = re.match(r"^[.'](B|I|BR|IR|RB|BI|IB|RI|SM|SB)\s+(.*)$", line)
            if m:
                cur.append(m.group(2).replace('"', ""))
            else:
                flush()
            continue
        if not line.strip():
            flush()
            continue
        cur.append(line.strip())
    flush()
    out = []
    for p in paras:
        for rx, rep in _ROFF_RE:
            p = rx.sub(rep, p)
        out.append(p)
    return out


def _plain_paragraphs(src):
    """Paragraphs of a plain text file; Debian copyright files use ' .' as a blank line."""
    lines = []
    for line in src.splitlines():
        s = line.strip()
        lines.append("" if s == "." else s)
    return [" ".join(p.split()) for p in "\n".join(lines).split("\n\n")]


_WORD = re.compile(r"[A-Za-z]+")


def _good(p):
    if not (60 <= len(p) <= 1200) or not p.isascii():
        return False
    words = p.split()
    if len(words) < 10 or not p.rstrip().endswith((".", "!", "?")):
        return False
    alpha = sum(1 for w in words if _WORD.fullmatch(w.strip(".,;:()'\"!?")))
    if alpha < 0.75 * len(words):
        return False
    bad = sum(p.count(ch) for ch in "{}[]<>|\\@#$=_*")
    return bad <= 2


def _read(path):
    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def natural_paragraphs(max_man=4000, log=None):
    """De-duplicated prose paragraphs from the offline sources, in a fixed order."""
    paras = []
    for f in sorted(glob.glob("/usr/share/common-licenses/*")):
        if os.path.isfile(f):
            paras += _plain_paragraphs(_read(f))
    for f in sorted(glob.glob("/usr/share/doc/*/copyright")):
        paras += _plain_paragraphs(_read(f))
    for f in sorted(glob.glob("/usr/share/games/fortunes/*")):
        if os.path.isfile(f) and not f.endswith((".dat", ".u8")):
            paras += [" ".join(x.split()) for x in _read(f).split("\n%\n")]
    man = []
    for sec in ("1", "5", "7", "8"):
        man += sorted(f for f in glob.glob(f"/usr/share/man/man{sec}/*")
                      if not os.path.basename(f).startswith("gcloud"))   # 16k generated pages
    for f in man[:max_man]:
        if os.path.isfile(f):
            paras += _roff_paragraphs(_read(f))
    seen, out = set(), []
    for p in paras:
        p = " ".join(p.split())
        if not _good(p):
            continue
        h = hashlib.sha1(p.lower().encode()).digest()
        if h in seen:
            continue
        seen.add(h)
        out.append(p)
    if log:
        log(f"natural text: {len(out)} paragraphs, {sum(len(p) for p in out)} chars")
    return out


def word_list(paras, n=1500):
    """The n most frequent lower-case words (3-10 letters) of the natural text."""
    cnt = {}
    for p in paras:
        for w in _WORD.findall(p):
            if w.islower() and 3 <= len(w) <= 10:
                cnt[w] = cnt.get(w, 0) + 1
    ranked = sorted(cnt.items(), key=lambda kv: (-kv[1], kv[0]))
    return [w for w, _ in ranked[:n]]


def sentences(paras):
    out = []
    for p in paras:
        for s in re.split(r"(?<=[.!?])\s+", p):
            if 30 <= len(s) <= 160 and s[0].isupper():
                out.append(s)
    return out


# ---------------------------------------------------------------------------------------------
# synthetic dialogues

def held_out(a, b):
    """Operand pairs reserved for evaluation (about 1 in 8)."""
    return (a * 7 + b * 13) % 8 == 3


_RESULT = re.compile(r"\d+ [+-] \d+ = ")


class Dialogues:
    def __init__(self, words, sents, seed, result_weight=1.0, copy_weight=1.0, first_weight=None,
                 mix=None, hard_copy=0.0, sentence_frac=0.25, number_copy=0.0):
        """result_weight: loss weight of the result digits (and <|im_end|>) of an arithmetic
        answer "A + B = C"; the copied "A + B = " keeps weight 1. copy_weight: loss weight of
        a repeat/copy answer (its <|im_end|> keeps weight 1); lines answers are copies too and
        get it as well. mix: {task: weight} overriding TASKS' weights (see parse_mix).
        hard_copy: fraction of repeat/copy turns whose phrase holds a trap (hard_phrase); 0
        leaves the generator's output unchanged.
        sentence_frac: fraction of plain repeat/copy phrases cut from a natural sentence (the
        rest are word runs); the default 0.25 is what the held-out evaluation draws.
        number_copy: fraction of repeat/copy turns whose phrase is a word run with a number
        written as documentation writes them (a version, a year range, a size; see
        number_like) among its words; 0 leaves the generator's output unchanged."""
        if not 0.0 <= hard_copy <= 1.0:
            raise ValueError(f"hard copy fraction {hard_copy}: must be 0 .. 1")
        if not 0.0 <= number_copy <= 1.0:
            raise ValueError(f"number copy fraction {number_copy}: must be 0 .. 1")
        if not 0.0 <= sentence_frac <= 1.0:
            raise ValueError(f"sentence fraction {sentence_frac}: must be 0 .. 1")
        self.hard_copy = hard_copy
        self.sentence_frac = sentence_frac
        self.number_copy = number_copy
        self.twins = None
        self.rng = random.Random(seed)
        self.tasks = self.weighted_tasks(mix or {})
        self.words = words
        self.sents = sents
        self.result_weight = result_weight
        self.copy_weight = copy_weight
        self.first_weight = copy_weight if first_weight is None else first_weight
        self.last_task = None

    @classmethod
    def parse_mix(cls, text):
        """"repeat=30,lines=10" -> {"repeat": 30, "lines": 10}; ValueError naming the bad part
        (unknown task, weight not an integer 0 .. 100)."""
        names = [n for n, _ in cls.TASKS]
        mix = {}
        for part in filter(None, text.split(",")):
            name, eq, w = part.partition("=")
            if name not in names:
                raise ValueError(f"unknown task {name!r} (tasks: {', '.join(names)})")
            if not eq or not w.isdigit() or int(w) > 100:
                raise ValueError(f"{part!r}: the weight must be an integer 0 .. 100")
            mix[name] = int(w)
        cls.weighted_tasks(mix)
        return mix

    @classmethod
    def weighted_tasks(cls, mix):
        """[(task, weight)] of TASKS with mix's weights in place; ValueError if a weight is
        negative or all are 0."""
        tasks = [(n, mix.get(n, w)) for n, w in cls.TASKS]
        if any(w < 0 for _, w in tasks) or not sum(w for _, w in tasks):
            raise ValueError(f"task mix {mix}: weights must be >= 0 and not all 0")
        return tasks

    # -- helpers
    def phrase(self, lo=2, hi=8):
        r = self.rng
        if r.random() < self.sentence_frac and self.sents:
            s = r.choice(self.sents)
            w = s.split()
            if len(w) > 10:
                s = " ".join(w[:r.randint(4, 10)])
            return s
        return " ".join(self.word_run(lo, hi))

    def word_run(self, lo, hi):
        """lo..hi random words of the word list, the first capitalised 30 % of the time."""
        r = self.rng
        ws = [r.choice(self.words) for _ in range(r.randint(lo, hi))]
        if r.random() < 0.3:
            ws[0] = ws[0].capitalize()
        return ws

    def hard_phrase(self):
        """3..8 words where one word comes back later, as itself, or as another word of the
        list with the same first four letters ("utility ... utilities") or the same last three
        ("creating ... operating"), each time followed by something else. The shared token(s)
        then occur twice in the prompt, and a copy that only asks "what came after this token"
        jumps to the second occurrence's successor or loops there: most copy misses are that."""
        r = self.rng
        if self.twins is None:
            self.twins = {}
            for w in self.words:
                self.twins.setdefault("<" + w[:4], []).append(w)
                self.twins.setdefault(">" + w[-3:], []).append(w)
        ws = self.word_run(3, 8)
        i = r.randrange(len(ws) - 1)
        j = r.randrange(i + 1, len(ws))
        w = ws[i].lower()
        kind = r.randrange(3)
        if kind:
            alt = [x for x in self.twins.get("<" + w[:4] if kind == 1 else ">" + w[-3:], [])
                   if x != w]
            w = r.choice(alt) if alt else w
        ws[j] = w
        return " ".join(ws)

    def number_like(self):
        """A number as documentation writes one: every digit is its own token, so copying
        "2001-2006" or "1.19.0" cannot go by the last token or two alone."""
        r = self.rng
        n = lambda lo, hi: str(r.randint(lo, hi))
        k = r.randrange(6)
        if k == 0:
            return n(0, 10 ** r.randint(1, 6) - 1)
        if k == 1:
            return ".".join(n(0, 20 if i else 9) for i in range(r.randint(2, 4)))
        if k == 2:
            a = r.randint(1970, 2030)
            return f"{a}-{a + r.randint(1, 30)}"
        if k == 3:
            return str(2 ** r.randint(3, 16)) + r.choice(["", "k", "M", "bit", "ms", " bytes"])
        if k == 4:
            return f"{r.randint(1990, 2030)}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}"
        return r.choice(["v", "-", "+", "0x", "#"]) + n(0, 99999)

    def number_phrase(self):
        ws = self.word_run(2, 7)
        ws.insert(self.rng.randrange(len(ws) + 1), self.number_like())
        return " ".join(ws)

    def number(self, digits=None):
        r = self.rng
        d = digits or r.choices([1, 2, 3], weights=[1, 4, 3])[0]
        return r.randint(0 if d == 1 else 10 ** (d - 1), 10 ** d - 1)

    # -- tasks: each returns (user, assistant)
    def repeat(self):
        hard = self.hard_copy and self.rng.random() < self.hard_copy
        num = not hard and self.number_copy and self.rng.random() < self.number_copy
        p = self.hard_phrase() if hard else self.number_phrase() if num else self.phrase()
        t = self.rng.choice(["Repeat after me: {}", "Please repeat: {}", "Repeat this: {}",
                             "Copy this text: {}", "Say \"{}\"", "Echo: {}",
                             "Repeat the phrase \"{}\"", "Can you repeat this? {}"])
        return t.format(p), p

    def lines(self):
        """The phrase's words one per line: every answer word starts a line, so it is spelt
        without the leading space it has in the prompt (the re-spelling a copy answer's first
        word needs)."""
        ws = self.word_run(2, 6)
        t = self.rng.choice(["Write each word on its own line: {}", "One word per line: {}",
                             "Put these words on separate lines: {}"])
        return t.format(" ".join(ws)), "\n".join(ws)

    def reverse(self):
        r = self.rng
        ws = [r.choice(self.words) for _ in range(r.randint(2, 6))]
        if r.random() < 0.5:
            t = r.choice(["Reverse the order of these words: {}", "Reverse this list: {}",
                          "Say these words backwards: {}"])
            return t.format(" ".join(ws)), " ".join(reversed(ws))
        t = r.choice(["Reverse the list: {}", "Put this list in reverse order: {}"])
        return t.format(", ".join(ws)), ", ".join(reversed(ws))

    def arith(self):
        r = self.rng
        op = r.choice("+++-")
        d = 2 if r.random() < 0.8 else None      # both operands 2-digit, else any of 1-3
        while True:
            a, b = self.number(d), self.number(d)
            if not held_out(a, b):
                break
        return self.arith_prompt(a, b, op)

    def arith_prompt(self, a, b, op, template=None):
        r = self.rng
        if op == "-" and b > a:
            a, b = b, a
        c = a + b if op == "+" else a - b
        if template is None:
            if op == "+":
                template = r.choice(["What is {a} + {b}?", "What is {a} + {b}?",
                                     "Calculate {a} + {b}.", "{a} + {b} = ?",
                                     "What is {a} plus {b}?", "Add {a} and {b}.",
                                     "Compute {a} + {b}"])
            else:
                template = r.choice(["What is {a} - {b}?", "What is {a} - {b}?",
                                     "Calculate {a} - {b}.", "{a} - {b} = ?",
                                     "What is {a} minus {b}?", "Subtract {b} from {a}."])
        return template.format(a=a, b=b), f"{a} {op} {b} = {c}"

    def count(self):
        r = self.rng
        n = r.randint(1, 9)
        if r.random() < 0.5:
            thing = r.choice(THINGS)
            items = " ".join([thing] * n)
            q = r.choice(["How many times does the word {t} appear here: {i}",
                          "Count the word {t} in: {i}"]).format(t=thing, i=items)
        else:
            items = ", ".join(r.choice(THINGS) for _ in range(n))
            q = r.choice(["How many items are in this list: {i}?",
                          "Count the items: {i}"]).format(i=items)
        return q, f"{n}"

    def sequence(self):
        r = self.rng
        kind = r.random()
        if kind < 0.55:
            start, step = r.randint(0, 50), r.choice([1, 2, 3, 5, 10, 4])
            seq = [start + i * step for i in range(r.randint(3, 5) + 3)]
        elif kind < 0.7:
            start = r.randint(0, 19)
            seq = [chr(ord("a") + start + i) for i in range(r.randint(3, 4) + 3)]
        elif kind < 0.85:
            start = r.randint(0, 6)
            seq = [DAYS[(start + i) % 7] for i in range(5)]
        else:
            start = r.randint(0, 11)
            seq = [MONTHS[(start + i) % 12] for i in range(5)]
        k = 3
        shown, rest = seq[:-k], seq[-k:]
        t = r.choice(["Continue the sequence: {}", "What comes next: {}",
                      "Continue: {}"])
        return t.format(", ".join(map(str, shown))), ", ".join(map(str, rest))

    def passage(self):
        r = self.rng
        people = r.sample(NAMES, r.randint(2, 3))
        facts = []
        qa = []
        for p in people:
            city, color, animal, job, food = (r.choice(CITIES), r.choice(COLORS),
                                              r.choice(ANIMALS), r.choice(JOBS), r.choice(FOODS))
            opts = [(f"{p} lives in {city}.", f"Where does {p} live?", f"{p} lives in {city}."),
                    (f"{p} has {_a(color)} {animal}.", f"What color is {p}'s {animal}?",
                     f"{p}'s {animal} is {color}."),
                    (f"{p} works as {_a(job)}.", f"What is {p}'s job?", f"{p} is {_a(job)}."),
                    (f"{p} likes {food}.", f"What does {p} like to eat?", f"{p} likes {food}.")]
            chosen = r.sample(opts, r.randint(1, 3))
            facts += [c[0] for c in chosen]
            qa += [(c[1], c[2]) for c in chosen]
        r.shuffle(facts)
        q, a = r.choice(qa)
        return f"Read this: {' '.join(facts)}\nQuestion: {q}", a

    def chat(self):
        return self.rng.choice(CHIT_CHAT)

    def complete(self):
        s = self.rng.choice(self.sents)
        w = s.split()
        k = self.rng.randint(2, max(2, len(w) // 2))
        return "Continue this text: " + " ".join(w[:k]), " ".join(w[k:])

    TASKS = [("repeat", 30), ("lines", 10), ("reverse", 2), ("arith", 50), ("count", 1),
             ("sequence", 2), ("passage", 3), ("chat", 1), ("complete", 1)]

    def turn(self):
        names, weights = zip(*self.tasks)
        task = self.rng.choices(names, weights=weights)[0]
        self.last_task = task
        return getattr(self, task)()

    def dialogue(self):
        """[(text, weight)] of one ChatML conversation of 1-2 turns."""
        r = self.rng
        segs = []
        if r.random() < 0.25:
            segs.append((f"<|im_start|>system\n{SYSTEM}<|im_end|>\n", 0))
        for _ in range(1 if r.random() < 0.85 else 2):
            u, a = self.turn()
            think = THINK_EMPTY if r.random() < 0.2 else ""
            segs += chatml_turn(u, think)
            m = _RESULT.match(a)
            if m and self.result_weight != 1.0:
                segs.append((a[:m.end()], 1))
                segs.append((a[m.end():] + "<|im_end|>", self.result_weight))
            elif self.last_task in ("repeat", "lines") and (self.copy_weight != 1.0 or
                                                  self.first_weight != 1.0):
                k = a.find(" ")
                if k > 0 and self.first_weight != self.copy_weight:
                    segs.append((a[:k], self.first_weight))
                    segs.append((a[k:], self.copy_weight))
                else:
                    segs.append((a, self.copy_weight))
                segs.append(("<|im_end|>", 1))
            else:
                segs.append((a + "<|im_end|>", 1))
            segs.append(("\n", 0))
        return segs


def _a(word):
    return ("an " if word[0] in "aeiou" else "a ") + word


def encode_dialogue(tok, segs):
    """Token ids of a dialogue's [(text, weight)] segments and each token's loss weight."""
    ids, w = [], []
    for text, wt in segs:
        t = tok.encode(text)
        ids += t
        w += [wt] * len(t)
    return ids, w


def chatml_turn(user, think=""):
    return [(f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n{think}", 0)]


def chatml_prompt(user, system=None):
    s = f"<|im_start|>system\n{system}<|im_end|>\n" if system else ""
    return s + f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
