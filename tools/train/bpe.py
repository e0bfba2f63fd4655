"""bpe.py — byte-level BPE for the demo model, stored the way real Qwen GGUFs store it.

- Pre-tokenizer: a hand-written matcher for the `qwen35` split regex of docs/models.md §3.2
      (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}
      | ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+
  (Python's `re` has no \\p{..}; character classes come from unicodedata).
- Tokens are GPT-2 byte-to-unicode strings: ids 0-255 are the 256 bytes in byte order, then one
  token per merge result in merge (rank) order, then the special tokens.
- Training: classic pair-count BPE over the pre-tokenized pieces, with incremental pair-count
  updates; ties broken by the smaller pair (string order), so the result is deterministic.
- Encoding: per piece, repeatedly merge the adjacent pair of lowest rank (GPT-2 / llama.cpp
  rule); special tokens are cut out of the text first (when `specials=True`).
"""

import heapq
import unicodedata
from collections import Counter, defaultdict

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]


def byte_chars():
    """GPT-2 byte-to-unicode: printable Latin-1 bytes map to themselves, the rest to U+0100+n."""
    keep = set(range(0x21, 0x7F)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    out, n = [], 0
    for b in range(256):
        if b in keep:
            out.append(chr(b))
        else:
            out.append(chr(256 + n))
            n += 1
    return out


BYTE_CHARS = byte_chars()
CHAR_BYTE = {c: b for b, c in enumerate(BYTE_CHARS)}


def to_unicode(text):
    return "".join(BYTE_CHARS[b] for b in text.encode("utf-8"))


def from_unicode(tok):
    return bytes(CHAR_BYTE[c] for c in tok)


# ---------------------------------------------------------------------------------------------
# qwen35 pre-tokenizer

# \s is Unicode's White_Space property (PropList.txt), as in the engine's tables. Python's
# str.isspace() differs: it also counts U+001C..U+001F (bidi class B/S), which \s does not.
WHITE_SPACE = frozenset([*range(0x09, 0x0E), 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B),
                         0x2028, 0x2029, 0x202F, 0x205F, 0x3000])


def _cls(ch):
    """L letter, M mark, N number, S white space, P anything else."""
    c = unicodedata.category(ch)[0]
    return c if c in "LMN" else ("S" if ord(ch) in WHITE_SPACE else "P")


def _fold(ch):
    """Simple case folding, only where it yields an ASCII letter (all that the contractions
    need): ASCII letters, U+017F (long s) -> s, U+212A (Kelvin sign) -> k; else ''."""
    if ch.isascii():
        return ch.lower() if ch.isalpha() else ""
    return {"\u017f": "s", "\u212a": "k"}.get(ch, "")


def pretokenize(text):
    """Split text into pieces exactly as the qwen35 regex does (docs §3.2)."""
    out = []
    n = len(text)
    cls = [_cls(ch) for ch in text]
    i = 0
    while i < n:
        j = _match(text, cls, i, n)
        out.append(text[i:j])
        i = j
    return out


def _run(cls, i, n, ok):
    while i < n and cls[i] in ok:
        i += 1
    return i


def _match(text, cls, i, n):
    ch = text[i]
    # 1. contractions (case-insensitive), in alternation order
    if ch == "'" and i + 1 < n:
        a = _fold(text[i + 1])
        b = _fold(text[i + 2]) if i + 2 < n else ""
        if a in ("s", "t", "m", "d"):
            return i + 2
        if (a in ("r", "v") and b == "e") or (a == "l" and b == "l"):
            return i + 3
    # 2. [^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+
    c = cls[i]
    if c not in "LN" and ch not in "\r\n" and i + 1 < n and cls[i + 1] in "LM":
        return _run(cls, i + 1, n, "LM")
    if c in "LM":
        return _run(cls, i, n, "LM")
    # 3. \p{N}: one digit
    if c == "N":
        return i + 1
    # 4. ' ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*'
    s = i + 1 if (ch == " " and i + 1 < n and cls[i + 1] == "P") else i
    if cls[s] == "P":
        j = _run(cls, s, n, "P")
        while j < n and text[j] in "\r\n":
            j += 1
        return j
    # white space: c == "S"
    end = _run(cls, i, n, "S")
    # 5. \s*[\r\n]+ : ends after the last newline of the run
    last_nl = -1
    for k in range(i, end):
        if text[k] in "\r\n":
            last_nl = k
    if last_nl >= 0:
        return last_nl + 1
    # 6. \s+(?!\S) ; 7. \s+
    if end == n or end - i == 1:
        return end
    return end - 1


# ---------------------------------------------------------------------------------------------
# training

def merge_pair(sym, a, b):
    """sym with every occurrence of the adjacent pair (a, b) joined, left to right."""
    out, k = [], 0
    while k < len(sym):
        if k + 1 < len(sym) and sym[k] == a and sym[k + 1] == b:
            out.append(a + b)
            k += 2
        else:
            out.append(sym[k])
            k += 1
    return out


def apply_merges(sym, merges, rank):
    """Symbols of one piece after BPE: repeatedly join the adjacent pair of lowest rank
    (GPT-2 / llama.cpp rule). rank: {pair: index into merges}."""
    while len(sym) > 1:
        best = min((r for r in map(rank.get, zip(sym, sym[1:])) if r is not None),
                   default=None)
        if best is None:
            break
        sym = merge_pair(sym, *merges[best])
    return sym


def train(piece_counts, n_new_tokens, log=None, space_merges=True):
    """piece_counts: Counter of pre-tokenized pieces (plain text). Merges until n_new_tokens
    distinct merge results exist. Returns the merge list [(left, right), ...] in rank order,
    tokens in byte-unicode form. space_merges=False: no merge takes a lone space as its left
    part, so " word" is always " " + the tokens of "word" (a word reads the same after a
    space as at the start of a line)."""
    space = to_unicode(" ")
    words = []   # list of symbol lists
    freqs = []
    for piece, f in sorted(piece_counts.items()):
        words.append(list(to_unicode(piece)))
        freqs.append(f)
    pair_count = Counter()
    where = defaultdict(set)   # pair -> word indices containing it
    for wi, w in enumerate(words):
        f = freqs[wi]
        for a, b in zip(w, w[1:]):
            pair_count[(a, b)] += f
            where[(a, b)].add(wi)
    # max-heap with lazy deletion; tie-break on the pair itself (smaller string first)
    heap = [(-c, p) for p, c in pair_count.items()]
    heapq.heapify(heap)
    merges = []
    made = set(BYTE_CHARS)
    n_new = 0
    while n_new < n_new_tokens and heap:
        negc, pair = heapq.heappop(heap)
        if pair_count.get(pair, 0) != -negc:
            continue            # stale entry
        if -negc < 2:
            break
        if not space_merges and pair[0] == space:
            continue            # dropped from the heap; re-pushed only when touched
        merges.append(pair)
        a, b = pair
        ab = a + b
        if ab not in made:
            made.add(ab)
            n_new += 1
        touched = Counter()
        for wi in list(where[pair]):
            w = words[wi]
            f = freqs[wi]
            # remove this word's old pairs, merge, add new pairs
            for x, y in zip(w, w[1:]):
                pair_count[(x, y)] -= f
                touched[(x, y)] += 0
            nw = merge_pair(w, a, b)
            words[wi] = nw
            for x, y in zip(w, w[1:]):
                where[(x, y)].discard(wi)
            for x, y in zip(nw, nw[1:]):
                pair_count[(x, y)] += f
                where[(x, y)].add(wi)
                touched[(x, y)] += 0
        for p in touched:
            c = pair_count.get(p, 0)
            if c > 0:
                heapq.heappush(heap, (-c, p))
            else:
                pair_count.pop(p, None)
        pair_count.pop(pair, None)
        if log and len(merges) % 500 == 0:
            log(f"bpe: {len(merges)} merges, last {ab!r} x{-negc}")
    return merges



def twin_merges(merges, log=None):
    """Merges extended so that every word token " word" (a space and ASCII letters) has a twin
    token "word": the spelling the word takes where it starts a line or follows a quote. For
    each such token, in rank order, the twin's current pieces are joined left to right by merges
    appended at the end of the list (the lowest priority), so no earlier encoding changes
    except of pieces that end up with fewer tokens. Returns (merges, [(space token, twin)])."""
    merges = [tuple(m) for m in merges]
    space = to_unicode(" ")
    rank = {m: r for r, m in enumerate(merges)}

    words = [a + b for a, b in merges]
    pairs, seen, n0 = [], set(), len(merges)
    for t in words:
        w = t[1:]
        if not (t.startswith(space) and len(w) > 1 and w.isascii() and w.isalpha()) or t in seen:
            continue
        seen.add(t)
        sym = apply_merges(list(w), merges, rank)
        while len(sym) > 1:
            m = (sym[0], sym[1])
            rank[m] = len(merges)
            merges.append(m)
            sym = apply_merges(list(w), merges, rank)
        pairs.append((t, w))
    if log:
        log(f"bpe: {len(pairs)} twin words, {len(merges) - n0} merges added")
    return merges, pairs

# ---------------------------------------------------------------------------------------------
# vocabulary + encoder

class Tokenizer:
    def __init__(self, merges, n_vocab=None):
        """merges: [(left, right)] rank-ordered, byte-unicode strings. The vocabulary is the
        256 bytes, the merge results (first occurrence), the specials, then [PADi] up to
        n_vocab."""
        self.merges = [tuple(m) for m in merges]
        toks = list(BYTE_CHARS)
        seen = set(toks)
        for a, b in self.merges:
            if a + b not in seen:
                seen.add(a + b)
                toks.append(a + b)
        toks += SPECIALS
        if n_vocab is not None:
            if n_vocab < len(toks):
                raise ValueError(f"vocabulary needs {len(toks)} > {n_vocab} entries")
            toks += [f"[PAD{i}]" for i in range(len(toks), n_vocab)]
        self.tokens = toks
        self.id = {t: i for i, t in enumerate(toks)}
        self.rank = {m: r for r, m in enumerate(self.merges)}
        n_plain = len(seen)
        self.token_type = [1] * n_plain + [3] * len(SPECIALS) + \
            [5] * (len(toks) - n_plain - len(SPECIALS))
        self.special_id = {s: self.id[s] for s in SPECIALS}
        self.bos = self.pad = self.special_id["<|endoftext|>"]
        self.eos = self.special_id["<|im_end|>"]
        self._cache = {}

    def n_vocab(self):
        return len(self.tokens)

    def _bpe(self, piece):
        ids = self._cache.get(piece)
        if ids is not None:
            return ids
        sym = apply_merges(list(to_unicode(piece)), self.merges, self.rank)
        ids = [self.id[s] for s in sym]
        if len(self._cache) < 500000:
            self._cache[piece] = ids
        return ids

    def encode(self, text, specials=True):
        ids = []
        for part, is_special in self._split_specials(text, specials):
            if is_special:
                ids.append(self.special_id[part])
            else:
                for piece in pretokenize(part):
                    ids.extend(self._bpe(piece))
        return ids

    @staticmethod
    def _split_specials(text, specials):
        if not specials:
            return [(text, False)] if text else []
        out = []
        i = 0
        while i < len(text):
            j = text.find("<", i)
            hit = None
            while j >= 0:
                for s in SPECIALS:
                    if text.startswith(s, j):
                        hit = s
                        break
                if hit:
                    break
                j = text.find("<", j + 1)
            if hit is None:
                out.append((text[i:], False))
                break
            if j > i:
                out.append((text[i:j], False))
            out.append((hit, True))
            i = j + len(hit)
        return out

    def decode(self, ids):
        bs = b""
        for t in ids:
            s = self.tokens[t]
            if self.token_type[t] == 3:
                bs += s.encode("utf-8")
            elif self.token_type[t] == 1:
                bs += from_unicode(s)
        return bs.decode("utf-8", errors="replace")


def count_pieces(texts):
    """Counter of qwen35 pieces over texts, with special tokens cut out."""
    c = Counter()
    for t in texts:
        for part, sp in Tokenizer._split_specials(t, True):
            if not sp:
                c.update(pretokenize(part))
    return c
