"""`bertctl tokenize`: corpus files -> tokenizer artifact."""

from __future__ import annotations

from pathlib import Path

from bertctl import artifacts, console
from bertctl.config import TokenizeSettings
from bertctl.data import corpus, tokenizer
from bertctl.errors import BertctlError


def run(config: TokenizeSettings, target: artifacts.Target, sources: list[str],
        from_vocab: Path | None = None, from_pretrained: Path | None = None
        ) -> artifacts.Outcome:
    if from_vocab and from_pretrained:
        raise BertctlError("give either --from-vocab or --from-pretrained, not both")
    if not sources and not (from_vocab or from_pretrained):
        raise BertctlError("no corpus files given (a tokenizer is trained on a corpus, or "
                           "imported with --from-vocab / --from-pretrained)")
    files = corpus.expand_sources(sources) if sources else []
    inputs = [artifacts.file_input(f, "corpus") for f in files]
    if from_vocab:
        inputs.append(artifacts.file_input(from_vocab, "vocab"))
    if from_pretrained:
        hf_dir = from_pretrained
        if not hf_dir.is_dir():
            raise BertctlError(f"{hf_dir}: not a directory")
        inputs += [artifacts.file_input(hf_dir / n, "pretrained")
                   for n in ("tokenizer.json", "vocab.txt", "tokenizer_config.json")
                   if (hf_dir / n).is_file()]
    total_bytes = sum(f.stat().st_size for f in files)

    def build(tmp: Path) -> dict:
        stats = corpus.CorpusStats()
        sample: list[list[str]] = []
        lowercase = not config.cased
        trained = not (from_vocab or from_pretrained)
        # Training reads the corpus twice (its characters, then its words); an import reads it
        # once, to measure the vocabulary against it.
        with console.progress("reading corpus", total=total_bytes * (2 if trained else 1),
                              unit="bytes") as bar:
            def batches(tally: corpus.CorpusStats):
                for batch in corpus.iter_sentence_batches(files, config.text_column, tally):
                    bar.update(sum(map(len, batch)))
                    yield batch

            strip = config.strip_accents
            if from_pretrained:
                tok, lowercase, strip = tokenizer.from_hf_directory(from_pretrained)
            elif from_vocab:
                tok = tokenizer.from_vocab(from_vocab, lowercase, config.strip_accents)
            else:
                try:
                    tok = tokenizer.train(batches(corpus.CorpusStats()),
                                          tokenizer.sample_batches(batches(stats), sample),
                                          config.vocab_size, lowercase, config.strip_accents,
                                          config.min_frequency, config.limit_alphabet,
                                          config.unused_tokens)
                except tokenizer.EmptyCorpus:
                    raise BertctlError(f"{', '.join(sources)}: corpus holds no text") from None
            if files and not trained:
                for _ in tokenizer.sample_batches(batches(stats), sample):
                    pass
        if files and stats.sentences == 0:
            raise BertctlError(f"{', '.join(sources)}: corpus holds no text")
        tokenizer.save(tok, tmp, lowercase, strip)
        info = tokenizer.TokenizerInfo.of(tok, lowercase)
        measured = tokenizer.measure(tok, [s for b in sample for s in b])
        console.log(f"vocabulary of {info.vocab_size:,} tokens; unknown-token rate "
                    f"{measured['unk_rate']:.4%}, {measured['pieces_per_word']:.2f} pieces/word")
        return {"tokenizer": info.as_dict(), **stats.as_dict(), **measured}

    return artifacts.produce("tokenizer", config, inputs, target, build)
