"""Options that several `jeirt` commands share."""

import typer

DataOpt = typer.Option(None, "--data", help="dataset folder (long format, EmbedLLM CSVs, harness or HELM output); "
                                            "default: the embedded SYNTHETIC dataset")
EncoderOpt = typer.Option("all-MiniLM-L6-v2", "--encoder", help="sentence-transformers name or path (default: "
                          "bundled all-MiniLM-L6-v2), optionally +int8/+bf16/+fp16, or 'hashing' (fast test encoder)")
SeedOpt = typer.Option(0, help="the split seed (by question, 80/10/10) and the training seed")
SplitOpt = typer.Option(None, "--split", help="your own split: CSV/Parquet with columns question_id,split "
                                              "(train/val/test), or a split.json a run saved")
PartialSplitOpt = typer.Option(False, "--partial-split", help="with --split: train and test on the questions "
                               "it lists, leaving the others out (without it, such a split is refused)")
SearchOpt = typer.Option(True, "--search/--fixed", help="choose the configuration on validation with a Ray Tune "
                         "search (default), or train the fixed configuration in this process (quick, no Ray)")
TrialsOpt = typer.Option(None, "--trials", help="configurations per search (default: scaled with the data)")
CriterionOpt = typer.Option("val_loss", "--criterion", help="rank trials by val_loss, val_accuracy or val_auc")
MembersOpt = typer.Option(None, "--members", min=1, help="ensemble size: the best trials of a search, or seeds (default 5)")
FinetuneOpt = typer.Option(None, "--finetune", help="train the encoder's top K transformer layers end to end "
                           "(top-K, e.g. top-2, or all); the fine-tuned encoder is saved with the space")
EncoderLrOpt = typer.Option(3e-5, "--encoder-lr", help="with --finetune: the encoder layers' learning rate")
CostsOpt = typer.Option(None, "--costs", help="the routing study's per-call cost of each LLM, in any unit: JSON "
                        "{model: cost} or CSV model,cost (default: billions of parameters read from the names; USD "
                        "comes from --prices)")
