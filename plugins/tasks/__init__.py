"""Training tasks: data, batching, loss and metrics."""

from zoo import hookimpl


@hookimpl
def register_tasks(register):
    for name, what in (("sort", "sorted"), ("copy", "copied"), ("reverse", "reversed")):
        register(
            name,
            f"zoo.plugins.tasks.sequences:{name.capitalize()}Task",
            description=f"Random digit sequences to the same sequence {what} (BOS/EOS/PAD); "
                        "token and sequence accuracy",
            capabilities={"architectures": ("seq2seq",)},
        )
    register(
        "translate-de-en",
        "zoo.plugins.tasks.translate:TranslateDeEn",
        description="German-English sentence pairs from Debian's trans-de-en; BPE; BLEU and chrF",
        capabilities={"architectures": ("seq2seq",)},
    )
    register(
        "lm-english",
        "zoo.plugins.tasks.language_model:EnglishLanguageModel",
        description="Next-token prediction on the English sentences of Debian's trans-de-en; "
                    "byte-level BPE; perplexity",
        capabilities={"architectures": ("decoder",)},
    )
    register(
        "pairs-de-en",
        "zoo.plugins.tasks.sentence_pairs:SentencePairs",
        description="German-English sentence pairs of Debian's trans-de-en as sentence "
                    "embeddings, in-batch negatives; retrieval@1",
        capabilities={"architectures": ("encoder",)},
    )
    register(
        "fashion-mnist",
        "zoo.plugins.tasks.fashion_mnist:FashionMNIST",
        description="Fashion-MNIST (60k/10k 28x28 images, 10 classes) from Debian's "
                    "dataset-fashion-mnist; top-1 accuracy",
        capabilities={"architectures": ("vit",)},
    )
