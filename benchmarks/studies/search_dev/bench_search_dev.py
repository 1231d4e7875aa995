"""Search, round three (#87): the search pipeline's choices made on a dev set of the user's
data, on two retrieval sets its old fixed rules were not read from, against those rules.

    .venv/bin/python benchmarks/studies/search_dev/bench_search_dev.py --shared ../shared/data --out runs/bench-dev \\
        --model MODEL [--sets squad-sentences wikitext-ict] [--seeds 0 1 2] \\
        [--variants dev fixed] [--threads 2] [--flags "--precision fp32"]

The sets (built here from the shared data; the test queries are other articles' than the
training pairs'):
- squad-sentences: SQuAD 2.0's answerable questions against every sentence of the five
  articles, the relevant sentence the one holding the answer's start; training pairs from the
  first three articles (473), test queries from the last two (232) over all 725 sentences.
- wikitext-ict: the inverse cloze task (Lee et al. 2019) on WikiText-2: a sentence of a
  paragraph as the query, the paragraph without it as the document; 700 training pairs from
  the validation articles, 700 test queries from the test articles over every test paragraph
  (1,514).

Each variant is `make -C pipelines search` on the same TRAIN and BEIR: `dev` this code's
pipeline (every choice on a dev split of TRAIN), `fixed` the rules before it (the search.mk of
the commit given by --fixed-rev, run with today's bertctl, trained on the whole TRAIN). What
is read off each run: the test nDCG@10 of the model it ships (FINAL's export), of its
second stage, of the original model, and each step's; the CPU seconds of every command and of
the dev measurements alone (the split, the dev rows, the dev evals and the choices). Results go
to OUT/results.json; the table prints means over seeds with paired standard errors.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/: its folders import as packages
from tools import common  # noqa: E402  (benchmarks/tools/common.py)

ROOT = common.ROOT
SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(<])")


def _write_beir(out: Path, corpus: dict[str, str], queries: dict[str, str],
                qrels: dict[str, str]) -> None:
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    with open(out / "corpus.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"_id": d, "title": "", "text": t}) + "\n"
                     for d, t in corpus.items())
    with open(out / "queries.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries.items())
    with open(out / "qrels" / "test.tsv", "w", encoding="utf-8") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        f.writelines(f"{q}\t{d}\t1\n" for q, d in qrels.items())


def _write_pairs(path: Path, pairs: list[tuple[str, str]]) -> None:
    """The pairs as JSON lines (the pipeline's TRAIN) and as bench_search.py's --data reads
    them: train.tsv (no tabs in any text) and train_sentences.txt, the positives to mine
    from."""
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"query": q, "positive": p}) + "\n" for q, p in pairs)
    with open(path.with_suffix(".tsv"), "w", encoding="utf-8") as f:
        f.write("query\tpositive\n")
        f.writelines(f"{q}\t{p}\n" for q, p in pairs)
    (path.parent / "train_sentences.txt").write_text(
        "".join(p + "\n" for p in dict.fromkeys(p for _, p in pairs)), encoding="utf-8")


def _clean(text: str) -> str:
    return " ".join(text.replace("\t", " ").split())


def squad_sentences(shared: Path, out: Path) -> dict:
    """SQuAD questions against their articles' sentences (see the module's docstring)."""
    data = json.loads((shared / "squad" / "dev-v2.0.first5articles.json").read_text())["data"]
    corpus: dict[str, str] = {}
    pairs, queries, qrels = [], {}, {}
    for a, article in enumerate(data):
        for p, paragraph in enumerate(article["paragraphs"]):
            context = paragraph["context"]
            spans, start = [], 0
            for piece in SENTENCE.split(context):
                at = context.index(piece, start)
                spans.append((at, at + len(piece), _clean(piece)))
                start = at + len(piece)
            ids = []
            for s, (_, _, text) in enumerate(spans):
                ids.append(f"a{a}p{p}s{s}")
                corpus[ids[-1]] = text
            for qa in paragraph["qas"]:
                if qa.get("is_impossible") or not qa["answers"]:
                    continue
                at = qa["answers"][0]["answer_start"]
                s = next(i for i, (b, e, _) in enumerate(spans) if b <= at < e + 1)
                question = _clean(qa["question"])
                if a < 3:
                    pairs.append((question, spans[s][2]))
                else:
                    queries[qa["id"]] = question
                    qrels[qa["id"]] = ids[s]
    _write_beir(out / "beir", corpus, queries, qrels)
    _write_pairs(out / "train.jsonl", pairs)
    return {"train_pairs": len(pairs), "test_queries": len(queries), "documents": len(corpus)}


def _detok(line: str) -> str:
    text = line.replace(" @-@ ", "-").replace(" @,@ ", ",").replace(" @.@ ", ".")
    text = re.sub(r" ([.,;:!?)'])", r"\1", text)
    text = re.sub(r"([(]) ", r"\1", text)
    return _clean(text.replace(" 's", "'s").replace(" n't", "n't"))


def _paragraphs(path: Path) -> list[str]:
    return [_detok(x) for x in path.read_text(encoding="utf-8").splitlines()
            if x.strip() and not x.strip().startswith("=")]


def _cloze(paragraphs: list[str], rng: random.Random, prefix: str):
    """(query, document) of each paragraph of at least three sentences: a sentence of five
    words or more, and the paragraph without it."""
    for n, para in enumerate(paragraphs):
        sentences = SENTENCE.split(para)
        usable = [i for i, s in enumerate(sentences) if len(s.split()) >= 5]
        if len(sentences) < 3 or not usable:
            continue
        i = rng.choice(usable)
        yield f"{prefix}{n}", sentences[i], " ".join(sentences[:i] + sentences[i + 1:])


def wikitext_ict(shared: Path, out: Path) -> dict:
    """The inverse cloze task on WikiText-2 (see the module's docstring)."""
    rng = random.Random(0)
    text = shared / "pretrain_text" / "wikitext-2-v1-tokens"
    pairs = [(q, d) for _, q, d in _cloze(_paragraphs(text / "valid.txt"), rng, "v")]
    pairs = rng.sample(pairs, min(ICT_PAIRS, len(pairs)))
    corpus, queries, qrels = {}, {}, {}
    test = list(_cloze(_paragraphs(text / "test.txt"), rng, "t"))
    asked = set(rng.sample(range(len(test)), min(ICT_QUERIES, len(test))))
    for n, (key, q, d) in enumerate(test):
        corpus[f"d{key}"] = d          # every paragraph a document, a sample of them asked
        if n in asked:
            queries[f"q{key}"], qrels[f"q{key}"] = q, f"d{key}"
    _write_beir(out / "beir", corpus, queries, qrels)
    _write_pairs(out / "train.jsonl", pairs)
    return {"train_pairs": len(pairs), "test_queries": len(queries), "documents": len(corpus)}


SETS = {"squad-sentences": squad_sentences, "wikitext-ict": wikitext_ict}
# The inverse cloze set's size: 700 training pairs (of 1,350) and 700 test queries (of 1,514,
# every test paragraph searched), so a pipeline run fits a session beside the other set's.
ICT_PAIRS, ICT_QUERIES = 700, 700
DEV_STEPS = ("split", "dev-rows", "dev-", "choose-")


def _fixed_makefile(rev: str, out: Path) -> Path:
    path = out / f"search-{rev}.mk"
    if not path.is_file():
        text = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:pipelines/search.mk"],
                              check=True, capture_output=True, text=True).stdout
        path.write_text(text, encoding="utf-8")
    return path


def _cpu_of(log: Path) -> dict[str, float]:
    return json.loads(log.read_text()) if log.is_file() else {}


def run_pipeline(variant: str, data: Path, runs: Path, model: Path, seed: int, args) -> dict:
    """One pipeline run; each bertctl command's CPU seconds (children's rusage, a wrapper per
    command)."""
    makefile = (ROOT / "pipelines" / "search.mk" if variant == "dev"
                else _fixed_makefile(args.fixed_rev, args.out))
    cpu = runs / "cpu.jsonl"
    runs.mkdir(parents=True, exist_ok=True)
    wrapper = runs / "bertctl-timed"
    wrapper.write_text(
        "#!/bin/sh\n"
        f"exec {sys.executable} {Path(__file__).resolve()} --timed {cpu} \"$@\"\n")
    wrapper.chmod(0o755)
    variables = [f"MODEL={model}", f"TRAIN={data / 'train.jsonl'}", f"BEIR={data / 'beir'}",
                 f"RUNS={runs}", f"SEED={seed}", f"BERTCTL={wrapper}",
                 f"FLAGS={args.flags} --threads {args.threads}", f"ROOT={ROOT}"]
    started = time.time()
    r = subprocess.run(["make", "-f", str(makefile), "search", *variables], cwd=ROOT,
                       capture_output=True, text=True, env=common.env(args.threads))
    (runs / "make.log").write_text(r.stdout + r.stderr)
    if r.returncode:
        raise SystemExit(f"{runs}: make failed; see {runs / 'make.log'}")
    steps = {}
    for line in cpu.read_text().splitlines():
        row = json.loads(line)
        steps[row["out"]] = steps.get(row["out"], 0.0) + row["cpu"]
    return {"wall_s": round(time.time() - started, 1), "cpu_s": steps}


def _ndcg(path: Path, kind: str = "per_query.tsv") -> dict[str, float]:
    rows = [x.split("\t") for x in (path / kind).read_text().splitlines()]
    col = rows[0].index("ndcg@10")
    return {r[0]: float(r[col]) for r in rows[1:]}


def read_run(variant: str, runs: Path) -> dict:
    """The test figures of one run: the original, the shipped first stage (the export) and
    second stage, and each step."""
    out = {"original": _ndcg(runs / "eval-original"), "shipped": _ndcg(runs / "eval-export")}
    steps = {}
    for e in sorted(runs.glob("eval-*")):
        steps[e.name] = statistics.fmean(_ndcg(e).values())
        if (e / "rerank_per_query.tsv").is_file():
            steps[e.name + ":rerank"] = statistics.fmean(_ndcg(e, "rerank_per_query.tsv")
                                                         .values())
    out["steps"] = steps
    if variant == "dev":
        choice = json.loads((runs / "choose-search" / "choice.json").read_text())
        picked = choice["chosen"]["name"]
        final = json.loads((runs / "choose-final" / "choice.json").read_text())["chosen"]
        out["choices"] = {c: (runs / f"choose-{c}" / "chosen.txt").read_text().strip()
                          for c in ("rounds", "teacher", "final", "search")
                          if (runs / f"choose-{c}").is_dir()}
        second = {"none": ("eval-export", "per_query.tsv"),
                  "late": ("eval-final-late", "rerank_per_query.tsv"),
                  "head": ("eval-late-head-late", "rerank_per_query.tsv")}.get(
            picked, ("eval-final-reranked", "rerank_per_query.tsv"))
        out["second"] = _ndcg(runs / second[0], second[1])
        out["final_model"] = final["name"]
    else:
        out["second"] = _ndcg(runs / "eval-distilled-reranked", "rerank_per_query.tsv") \
            if (runs / "eval-distilled-reranked").is_dir() else out["shipped"]
    return out


def _mean(x: dict[str, float]) -> float:
    return statistics.fmean(x.values())


def _paired(a: dict[str, float], b: dict[str, float]) -> str:
    d = [a[q] - b[q] for q in a]
    se = statistics.stdev(d) / math.sqrt(len(d))
    m = statistics.fmean(d)
    return f"{m:+.4f} ({m / se:+.1f} se)" if se else f"{m:+.4f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "bench-dev")
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--sets", nargs="+", default=list(SETS), choices=list(SETS))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--variants", nargs="+", default=["dev", "fixed"], choices=["dev", "fixed"])
    p.add_argument("--fixed-rev", default="75bcbb6", help="the commit whose search.mk holds "
                   "the fixed rules")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--flags", default="")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results_path = args.out / "results.json"
    results = json.loads(results_path.read_text()) if results_path.is_file() else {}
    print(f"# {common.machine(args.threads)}")
    for name in args.sets:
        data = args.out / "data" / name
        if not (data / "train.jsonl").is_file():
            print(name, SETS[name](args.shared, data))
    for seed in args.seeds:      # each seed over every set first: a stopped run covers both
        for name in args.sets:
            data = args.out / "data" / name
            for variant in args.variants:
                key = f"{name}/{variant}/{seed}"
                if key in results:
                    continue
                runs = args.out / "runs" / name / f"{variant}-seed{seed}"
                cost = run_pipeline(variant, data, runs, args.model, seed, args)
                results[key] = {**read_run(variant, runs), **cost}
                results_path.write_text(json.dumps(results))
                print(key, f"shipped {_mean(results[key]['shipped']):.4f}",
                      f"original {_mean(results[key]['original']):.4f}",
                      results[key].get("choices", ""), flush=True)
    table(results, args)


def table(results: dict, args) -> None:
    print("| set | variant | seeds | original | shipped (export) | shipped over original | "
          "second stage | CPU s | dev share of CPU |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.sets:
        for variant in args.variants:
            keys = [f"{name}/{variant}/{s}" for s in args.seeds if f"{name}/{variant}/{s}"
                    in results]
            if not keys:
                continue
            rs = [results[k] for k in keys]
            orig = statistics.fmean(_mean(r["original"]) for r in rs)
            ship = [_mean(r["shipped"]) for r in rs]
            second = [_mean(r["second"]) for r in rs]
            cpu = [sum(r["cpu_s"].values()) for r in rs]
            dev = [sum(v for k, v in r["cpu_s"].items()
                       if Path(k).name.startswith(DEV_STEPS)) for r in rs]
            gains = "; ".join(_paired(r["shipped"], r["original"]) for r in rs)
            print(f"| {name} | {variant} | {len(rs)} | {orig:.4f} | "
                  f"{statistics.fmean(ship):.4f} | {gains} | {statistics.fmean(second):.4f} | "
                  f"{statistics.fmean(cpu):.0f} | "
                  f"{statistics.fmean(d / c for d, c in zip(dev, cpu)):.1%} |")


def timed(log: Path, argv: list[str]) -> int:
    """Run bertctl with argv and append its CPU seconds (user + system, its own and its
    children's) and its --out to `log`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    code = subprocess.run([sys.executable, "-m", "bertctl", *argv]).returncode
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    out = argv[argv.index("--out") + 1] if "--out" in argv else ""
    with open(log, "a", encoding="utf-8") as f:
        f.write(json.dumps({"command": argv[0], "out": out, "cpu": round(cpu, 2)}) + "\n")
    return code


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--timed":
        raise SystemExit(timed(Path(sys.argv[2]), sys.argv[3:]))
    main()
