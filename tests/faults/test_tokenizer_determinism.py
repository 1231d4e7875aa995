"""One tokenizer id, one vocabulary (#26 item 7): training gives the same files in every
process."""

import json

from helpers import CORPUS, run_bertctl


def test_training_gives_one_vocabulary_in_every_process(tmp_path):
    """#26: tokenizers gives continuation pieces ids in hash-map order, new in each process, and
    those ids break merge ties (huggingface/tokenizers#1794); its alphabet limit breaks count ties
    the same way. Three processes, an alphabet limit that cuts through tied characters, one
    vocabulary (the previous code's differed in hundreds of lines)."""
    corpus_dir = tmp_path / "corpus"
    corpus_dir.mkdir()
    text = (CORPUS / "alice.txt").read_text(encoding="utf-8")
    (corpus_dir / "a.txt").write_text(text + "\nÜber façade naïve «ß» 中国人 日本語 ø å æ œ ł\n",
                                      encoding="utf-8")
    made = []
    for run in range(3):
        out = tmp_path / f"t{run}"
        r = run_bertctl("tokenize", corpus_dir, "--vocab-size", "1200", "--cased",
                        "--limit-alphabet", "60", "--out", out)
        assert r.returncode == 0, r.stderr
        made.append(((out / "vocab.txt").read_bytes(), (out / "tokenizer.json").read_bytes(),
                     json.loads((out / "artifact.json").read_text())["id"]))
    assert made[0] == made[1] == made[2]
    vocab = made[0][0].decode().splitlines()
    # Every continuation piece of one character was fixed before training: none came later.
    singles = [i for i, t in enumerate(vocab) if t.startswith("##") and len(t) == 3]
    assert singles and singles == list(range(singles[0], singles[0] + len(singles)))
    assert len(set(vocab)) == len(vocab) == 1200
