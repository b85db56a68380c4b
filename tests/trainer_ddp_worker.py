"""Run by torchrun in test_trainer_elmo.py: trains a sequence head with DDP on CPU (gloo) and writes the results."""

import json
import os
import sys

import torch
from trainer_data import sentence_dataset
from transformers import DataCollatorWithPadding, Trainer, TrainingArguments

from hf_elmo import ElmoForSequenceClassification, ElmoTokenizer


def eval_loss(model, tokenizer, dataset) -> float:
    batch = DataCollatorWithPadding(tokenizer)(list(dataset))
    with torch.no_grad():
        return model.eval()(**batch).loss.item()


def main(model_dir: str, output_dir: str) -> None:
    tokenizer = ElmoTokenizer.from_pretrained(model_dir)
    model = ElmoForSequenceClassification.from_pretrained(model_dir, num_labels=2, mix_dropout=0.1)
    args = TrainingArguments(
        output_dir=output_dir,
        use_cpu=True,
        ddp_backend="gloo",
        per_device_train_batch_size=8,
        num_train_epochs=16,
        learning_rate=0.1,
        lr_scheduler_type="constant",
        report_to="none",
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
    )
    trainer = Trainer(
        model=model,
        args=args,
        processing_class=tokenizer,
        train_dataset=sentence_dataset(tokenizer, 64, seed=0),
        eval_dataset=sentence_dataset(tokenizer, 32, seed=1),
    )
    # Not trainer.evaluate(): before train() it marks the model as prepared and Accelerate then skips the DDP wrap.
    before = eval_loss(model, tokenizer, trainer.eval_dataset)
    trainer.train()
    assert isinstance(trainer.model_wrapped, torch.nn.parallel.DistributedDataParallel), type(trainer.model_wrapped)
    after = trainer.evaluate()["eval_loss"]
    # Every rank reports its copy of the trained weights: DDP keeps them identical.
    weights = torch.cat([p.detach().flatten() for p in model.parameters() if p.requires_grad]).tolist()
    result = {"world_size": args.world_size, "before": before, "after": after, "weights": weights}
    with open(f"{output_dir}/rank{args.process_index}.json", "w") as handle:
        json.dump(result, handle)
    # Trainer leaves the gloo process group to interpreter exit, whose teardown once aborted a rank ("terminate called
    # without an active exception") and whose destroy_process_group() can wait on the other rank: the results are
    # written, so leave without the teardown.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
