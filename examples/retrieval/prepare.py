"""Builds examples/retrieval/ from the SQuAD 2.0 dev subset (../shared/data/squad/
dev-v2.0.first5articles.json): a question-to-paragraph retrieval set.

    python examples/retrieval/prepare.py PATH/dev-v2.0.first5articles.json

- beir/: corpus.jsonl holds every paragraph of the five articles (`_id` TITLE-N, `title`,
  `text`); queries.jsonl every answerable question (`_id` its SQuAD id); qrels/test.tsv judges
  each question of the last two articles relevant (1) to its own paragraph, qrels/dev.tsv those
  of the third.
- train.tsv: `query<TAB>positive` for the answerable questions of the first two articles, the
  question and its paragraph (tabs and newlines in the text replaced by spaces).

So a model is trained on the questions of some articles and scored on those of others, against
all the paragraphs.
"""

import json
import sys
from pathlib import Path

here = Path(__file__).parent
data = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))["data"]
corpus, queries, pairs = [], [], []
qrels = {"dev": [], "test": []}
for a, article in enumerate(data):
    for p, paragraph in enumerate(article["paragraphs"]):
        doc = f"{article['title']}-{p}"
        text = " ".join(paragraph["context"].split())
        corpus.append({"_id": doc, "title": article["title"].replace("_", " "), "text": text})
        for qa in paragraph["qas"]:
            if qa.get("is_impossible"):
                continue
            question = " ".join(qa["question"].split())
            queries.append({"_id": qa["id"], "text": question})
            if a < 2:
                pairs.append((question, text))
            else:
                qrels["dev" if a == 2 else "test"].append((qa["id"], doc))
(here / "beir" / "qrels").mkdir(parents=True, exist_ok=True)
for name, rows in (("corpus.jsonl", corpus), ("queries.jsonl", queries)):
    (here / "beir" / name).write_text("".join(json.dumps(r) + "\n" for r in rows),
                                      encoding="utf-8")
for split, rows in qrels.items():
    (here / "beir" / "qrels" / f"{split}.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t1\n" for q, d in rows),
        encoding="utf-8")
(here / "train.tsv").write_text("query\tpositive\n" + "".join(f"{q}\t{t}\n" for q, t in pairs),
                                encoding="utf-8")
print(f"{len(corpus)} paragraphs, {len(queries)} questions: {len(pairs)} training pairs, "
      f"{len(qrels['dev'])} dev and {len(qrels['test'])} test judgements")
