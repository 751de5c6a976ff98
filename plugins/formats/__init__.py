"""Foreign model formats: transformers folders read into zoo's components (and written
back from them), and the export targets CTranslate2 and ONNX."""

from zoo import hookimpl


@hookimpl
def register_formats(register):
    register(
        "marian",
        "zoo.plugins.formats.marian:MarianFormat",
        description="transformers' MarianMTModel (the opus-mt and opus-mt-tc-big models)",
        capabilities={"model_types": ("marian",), "writes": "transformers"},
    )
    register(
        "bart",
        "zoo.plugins.formats.bart:BartFormat",
        description="transformers' BartForConditionalGeneration (Lewis et al. 2020)",
        capabilities={"model_types": ("bart",)},
    )
    register(
        "mbart",
        "zoo.plugins.formats.bart:MBartFormat",
        description="transformers' MBartForConditionalGeneration (Liu et al. 2020)",
        capabilities={"model_types": ("mbart",)},
    )
    register(
        "t5",
        "zoo.plugins.formats.t5:T5Format",
        description="transformers' T5ForConditionalGeneration: T5, T5 v1.1, Flan-T5",
        capabilities={"model_types": ("t5",)},
    )
    register(
        "gpt2",
        "zoo.plugins.formats.gpt2:GPT2Format",
        description="transformers' GPT2LMHeadModel (Radford et al. 2019)",
        capabilities={"model_types": ("gpt2",), "writes": "transformers"},
    )
    register(
        "llama",
        "zoo.plugins.formats.llama:LlamaFormat",
        description="transformers' LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
                    "Qwen3ForCausalLM and Phi3ForCausalLM (Llama 2 and 3, TinyLlama, Mistral, "
                    "Qwen2.5, Qwen3, Phi-3)",
        capabilities={"model_types": ("llama", "mistral", "qwen2", "qwen3", "phi3"),
                      "writes": "transformers"},
    )
    register(
        "gemma",
        "zoo.plugins.formats.gemma:GemmaFormat",
        description="transformers' GemmaForCausalLM (Gemma Team 2024): gemma-2b, gemma-7b",
        capabilities={"model_types": ("gemma",), "writes": "transformers"},
    )
    register(
        "gemma2",
        "zoo.plugins.formats.gemma2:Gemma2Format",
        description="transformers' Gemma2ForCausalLM (Gemma Team 2024): gemma-2-2b, 9b, 27b",
        capabilities={"model_types": ("gemma2",), "writes": "transformers"},
    )
    register(
        "gemma3-text",
        "zoo.plugins.formats.gemma2:Gemma3TextFormat",
        description="transformers' Gemma3ForCausalLM (Gemma Team 2025): gemma-3-1b, the text "
                    "model of gemma 3",
        capabilities={"model_types": ("gemma3_text",)},  # gemma2's writer writes both
    )
    register(
        "bert",
        "zoo.plugins.formats.bert:BertFormat",
        description="transformers' BertModel, BertForMaskedLM and "
                    "BertForSequenceClassification (Devlin et al. 2019), and "
                    "sentence-transformers' folders of them (all-MiniLM-L6-v2)",
        capabilities={"model_types": ("bert",), "writes": "transformers"},
    )
    register(
        "roberta",
        "zoo.plugins.formats.roberta:RobertaFormat",
        description="transformers' RobertaModel, RobertaForMaskedLM and "
                    "RobertaForSequenceClassification (Liu et al. 2019)",
        capabilities={"model_types": ("roberta",), "writes": "transformers"},
    )
    register(
        "distilbert",
        "zoo.plugins.formats.distilbert:DistilBertFormat",
        description="transformers' DistilBertModel, DistilBertForMaskedLM and "
                    "DistilBertForSequenceClassification (Sanh et al. 2019)",
        capabilities={"model_types": ("distilbert",), "writes": "transformers"},
    )
    register(
        "clip",
        "zoo.plugins.formats.clip:CLIPFormat",
        description="transformers' CLIPModel (Radford et al. 2021): openai/clip-vit-base-patch32, "
                    "-patch16, clip-vit-large-patch14",
        capabilities={"model_types": ("clip",), "writes": "transformers"},
    )
    register(
        "deberta-v2",
        "zoo.plugins.formats.deberta:DebertaV2Format",
        description="transformers' DebertaV2Model, DebertaV2ForMaskedLM and "
                    "DebertaV2ForSequenceClassification (He et al. 2021, 2023): deberta-v3, "
                    "mdeberta-v3",
        capabilities={"model_types": ("deberta-v2",), "writes": "transformers"},
    )
    register(
        "modernbert",
        "zoo.plugins.formats.modernbert:ModernBertFormat",
        description="transformers' ModernBertModel, ModernBertForMaskedLM and "
                    "ModernBertForSequenceClassification (Warner et al. 2024): "
                    "ModernBERT-base, -large and the encoders built on them",
        capabilities={"model_types": ("modernbert",), "writes": "transformers"},
    )
    register(
        "mpnet",
        "zoo.plugins.formats.mpnet:MPNetFormat",
        description="transformers' MPNetModel, MPNetForMaskedLM and "
                    "MPNetForSequenceClassification (Song et al. 2020): mpnet-base, "
                    "all-mpnet-base-v2",
        capabilities={"model_types": ("mpnet",), "writes": "transformers"},
    )
    register(
        "xlm-roberta",
        "zoo.plugins.formats.roberta:XLMRobertaFormat",
        description="transformers' XLMRobertaModel, XLMRobertaForMaskedLM and "
                    "XLMRobertaForSequenceClassification (Conneau et al. 2020): "
                    "xlm-roberta, multilingual-e5, bge-m3, bge-reranker",
        capabilities={"model_types": ("xlm-roberta",), "writes": "transformers"},
    )
    register(
        "m2m100",
        "zoo.plugins.formats.m2m_100:M2M100Format",
        description="transformers' M2M100ForConditionalGeneration: M2M100 (Fan et al. 2021) "
                    "and NLLB-200 (NLLB Team 2022)",
        capabilities={"model_types": ("m2m_100",)},
    )
    register(
        "timm-vit",
        "zoo.plugins.formats.timm_vit:TimmViTFormat",
        description="timm's VisionTransformer checkpoints (a recipe's weights.converter)",
    )
    register(
        "ctranslate2",
        "zoo.plugins.formats.ctranslate2:CTranslate2Writer",
        description="CTranslate2's Translator, Generator and Encoder models (zoo export "
                    "--format ctranslate2; Klein et al. 2020)",
        capabilities={"writes": "ctranslate2"},
    )
    register(
        "onnx",
        "zoo.plugins.formats.onnx:OnnxWriter",
        description="ONNX graphs ONNX Runtime runs (zoo export --format onnx)",
        capabilities={"writes": "onnx"},
    )
    register(
        "vit",
        "zoo.plugins.formats.vit:ViTFormat",
        description="transformers' ViTForImageClassification (google/vit-*)",
        capabilities={"model_types": ("vit",)},
    )
