"""`bertctl tokenize`: corpus files -> tokenizer artifact."""

from __future__ import annotations

from pathlib import Path

from bertctl import console
from bertctl.contract import artifacts
from bertctl.stages.settings.tokenize import TokenizeSettings
from bertctl.data import corpus
from bertctl.data.tokenizer import extension, specials, training
from bertctl.data.tokenizer import files as tokenizer_files
from bertctl.errors import BertctlError

ADDED_FILE = "added_pieces.tsv"


def run(settings: TokenizeSettings, target: artifacts.Target, sources: list[str],
        from_vocab: Path | None = None, from_pretrained: Path | None = None,
        extend: Path | None = None) -> artifacts.Outcome:
    if extend is not None or settings.add is not None:
        return _extend(settings, target, sources, extend, from_vocab, from_pretrained)
    if from_vocab and from_pretrained:
        raise BertctlError("give either --from-vocab or --from-pretrained, not both")
    if not sources and not (from_vocab or from_pretrained):
        raise BertctlError("no corpus files given (a tokenizer is trained on a corpus, or "
                           "imported with --from-vocab / --from-pretrained)")
    _check_kind_options(settings, imported=bool(from_vocab or from_pretrained))
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
        lowercase = not settings.cased
        trained = not (from_vocab or from_pretrained)
        # an import reads it once, to measure the vocabulary against it
        passes = training.corpus_reads(settings.model) if trained else 1
        with console.progress("reading corpus", total=total_bytes * passes,
                              unit="bytes") as bar:
            def batches(tally: corpus.CorpusStats):
                for batch in corpus.iter_sentence_batches(files, settings.text_column, tally):
                    bar.update(sum(len(line.encode("utf-8")) for line in batch))
                    yield batch

            strip = settings.strip_accents
            if from_pretrained:
                tok, lowercase, strip = tokenizer_files.from_hf_directory(from_pretrained)
            elif from_vocab:
                tok = tokenizer_files.from_vocab(from_vocab, lowercase, settings.strip_accents)
            else:
                try:
                    tok = _train(settings, batches, stats, sample, lowercase)
                except training.EmptyCorpus:
                    raise BertctlError(f"{', '.join(sources)}: corpus holds no text") from None
            if files and not trained:
                for _ in training.sample_batches(batches(stats), sample):
                    pass
        if files and stats.sentences == 0:
            raise BertctlError(f"{', '.join(sources)}: corpus holds no text")
        tokenizer_files.save(tok, tmp, lowercase, strip)
        info = tokenizer_files.TokenizerInfo.of(tok, lowercase)
        measured = training.measure(tok, [s for b in sample for s in b])
        console.log(f"vocabulary of {info.vocab_size:,} tokens; unknown-token rate "
                    f"{measured['unk_rate']:.4%}, {measured['pieces_per_word']:.2f} pieces/word")
        for warning in stats.warnings():
            console.log(warning)
        return {"tokenizer": info.as_dict(), **stats.as_dict(), **measured}

    return artifacts.produce("tokenizer", settings, inputs, target, build)


def _check_kind_options(settings: TokenizeSettings, imported: bool) -> None:
    """A setting the kind does not read is refused, not silently ignored."""
    def flags(names) -> str:
        return ", ".join("--" + n.replace("_", "-") for n in sorted(names))

    reads = training.SETTINGS_OF_KIND
    if imported:
        kind = {"model", "special_tokens"} & settings.model_fields_set
        if kind:
            raise BertctlError(f"{flags(kind)}: an imported vocabulary keeps its own kind and "
                               f"special tokens")
        return
    wrong = (settings.model_fields_set & set().union(*reads.values())) - reads[settings.model]
    if wrong:
        raise BertctlError(f"{flags(wrong)} does not apply to a {settings.model} vocabulary (it "
                           f"reads {flags(reads[settings.model])})")


def _train(settings: TokenizeSettings, batches, stats, sample, lowercase: bool):
    """The vocabulary of the kind asked; WordPiece reads the corpus twice (its alphabet, then
    its words), BPE once, Unigram once and then once per round of its scores' estimate."""
    spelling = specials.spelling_for(settings.model, settings.special_tokens)
    if settings.model == "wordpiece":
        return training.train(
            batches(corpus.CorpusStats()), training.sample_batches(batches(stats), sample),
            settings.vocab_size, lowercase, settings.strip_accents, settings.min_frequency,
            settings.limit_alphabet, settings.unused_tokens)
    first = [True]   # the first read counts the corpus and samples it; Unigram's later do not

    def reads():
        if first.pop() if first else False:
            return training.sample_batches(batches(stats), sample)
        return batches(corpus.CorpusStats())

    return training.train_subwords(
        reads, settings.model, settings.vocab_size,
        lowercase, settings.strip_accents, settings.unicode, spelling,
        settings.min_frequency,
        settings.limit_alphabet if "limit_alphabet" in settings.model_fields_set else None)


def _extend(settings: TokenizeSettings, target: artifacts.Target, sources: list[str],
            base_dir: Path | None, from_vocab: Path | None = None,
            from_pretrained: Path | None = None) -> artifacts.Outcome:
    if base_dir is None or settings.add is None:
        raise BertctlError("--extend TOKENIZER and --add N go together: the tokenizer to extend "
                           "and how many words to add")
    # The extended tokenizer keeps its base's case, normalisation and ids: settings that shape
    # a trained vocabulary cannot apply, and taking them silently would change the id.
    unused = sorted(settings.model_fields_set & {"vocab_size", "cased", "strip_accents",
                                               "min_frequency", "limit_alphabet",
                                               "unused_tokens", "model", "special_tokens",
                                               "unicode"})
    if unused or from_vocab or from_pretrained:
        given = [f"--{n.replace('_', '-')}" for n in unused] + \
            [f for f, v in (("--from-vocab", from_vocab), ("--from-pretrained", from_pretrained))
             if v]
        raise BertctlError(f"--extend keeps its tokenizer's vocabulary, case and normalisation: "
                           f"{', '.join(given)} cannot apply")
    if not sources:
        raise BertctlError("--extend: no corpus files given (the words added are the corpus's)")
    if not base_dir.is_dir():
        raise BertctlError(f"{base_dir}: not a directory (a tokenizer artifact, or a model's or "
                           f"Hugging Face directory)")
    base, lowercase, strip = tokenizer_files.from_hf_directory(base_dir)
    extension.check_extensible(base, base_dir)
    files = corpus.expand_sources(sources)
    inputs = [artifacts.file_input(f, "corpus") for f in files] + [
        artifacts.file_input(base_dir / n, "extends") for n in ("tokenizer.json", "vocab.txt")
        if (base_dir / n).is_file()]
    total_bytes = sum(f.stat().st_size for f in files)

    def build(tmp: Path) -> dict:
        stats = corpus.CorpusStats()
        sample: list[list[str]] = []
        # Read three times: the frequent words, their counts, and a sample measured both ways.
        with console.progress("reading corpus", total=3 * total_bytes, unit="bytes") as bar:
            def batches(tally: corpus.CorpusStats | None = None):
                for batch in corpus.iter_sentence_batches(files, settings.text_column, tally):
                    bar.update(sum(len(line.encode("utf-8")) for line in batch))
                    yield batch

            added = extension.choose(base, batches, settings.add)
            for _ in training.sample_batches(batches(stats), sample):
                pass
        if stats.sentences == 0:
            raise BertctlError(f"{', '.join(sources)}: corpus holds no text")
        tok, pieces = extension.extend(base, added)
        tokenizer_files.save(tok, tmp, lowercase, strip)
        with open(tmp / ADDED_FILE, "w", encoding="utf-8") as f:
            f.write("id\tpiece\tcount\tbase_pieces\n")
            for i, a in enumerate(pieces):
                f.write(f"{base.get_vocab_size() + i}\t{a.piece}\t{a.count}\t{a.base_pieces}\n")
        text = [s for b in sample for s in b]
        before, after = training.measure(base, text), training.measure(tok, text)
        between = (f", with {len(pieces) - len(added):,} pieces their merges pass through"
                   if len(pieces) > len(added) else "")
        console.log(f"added {len(added):,} of the {settings.add:,} words asked{between} (vocabulary "
                    f"{base.get_vocab_size():,} -> {tok.get_vocab_size():,}); pieces per word "
                    f"{before['pieces_per_word']:.3f} -> {after['pieces_per_word']:.3f}")
        if len(added) < settings.add:
            console.log(f"only {len(added):,} words of the corpus (seen twice or more) are split "
                        f"by the base vocabulary: no more shorten it")
        info = tokenizer_files.TokenizerInfo.of(tok, lowercase)
        for warning in stats.warnings():
            console.log(warning)
        return {"tokenizer": info.as_dict(), **stats.as_dict(), **after,
                "extends": {"path": str(base_dir), "vocab_size": base.get_vocab_size(),
                            "added": len(added), "new_pieces": len(pieces),
                            "list": ADDED_FILE,
                            "pieces_per_word_before": before["pieces_per_word"],
                            "unk_rate_before": before["unk_rate"]}}

    return artifacts.produce("tokenizer", settings, inputs, target, build)
