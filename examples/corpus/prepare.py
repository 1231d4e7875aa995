"""How examples/corpus/*.txt were made from Project Gutenberg books (kept for provenance).

Google's pretraining format wants one sentence per line and a blank line between documents.
Gutenberg bodies are hard-wrapped paragraphs, so this joins each paragraph, splits it into
sentences with a plain punctuation rule, and closes a document at the first paragraph break
after at least 25 sentences (a book is far longer than a 128-token instance needs).

    python examples/corpus/prepare.py BOOK.txt [...] > examples/corpus/NAME.txt
"""

import re
import sys

SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]*[A-Z])")


def paragraphs(text):
    for block in re.split(r"\n\s*\n", text.replace("\r\n", "\n")):
        joined = " ".join(block.split())
        if joined:
            yield joined


def main(paths):
    for path in paths:
        doc = []
        for para in paragraphs(open(path, encoding="utf-8-sig").read()):
            doc.extend(s.strip() for s in SENTENCE_END.split(para) if s.strip())
            if len(doc) >= 25:
                print("\n".join(doc) + "\n")
                doc = []
        if doc:
            print("\n".join(doc) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
