"""A trained JE-IRT space: one or more members (seeds) sharing model names and encoder.

Predictions average the members' probabilities (an ensemble over seeds). On disk: weights in
`weights.safetensors`, everything else in `space.json`; never pickle.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import load_file as load_numpy
from safetensors.numpy import save_file as save_numpy
from safetensors.torch import load_file, save_file

from .modules import JEIRT, build_module
from .train import TrainConfig

NOT_ANSWERED = 255  # CoreSpace.answers where an LLM has no label
MAX_ANSWER_CELLS = 25_000_000  # a space keeps its LLMs' answers up to this many (25 MB); past it, none


@dataclass
class CoreSpace:
    members: list[torch.nn.Module]
    config: TrainConfig
    encoder_id: str
    in_dim: int
    model_names: list[str]
    question_ids: list[str] = field(default_factory=list)
    metadata: dict = field(default_factory=dict)  # metrics, data fingerprint, routing policy, ...
    # the frozen encoder embeddings and benchmarks of the training questions (aligned with
    # question_ids), kept so that serving can onboard an LLM from question ids and name a
    # query's nearest benchmark without the dataset
    question_embeddings: np.ndarray | None = None
    question_benchmarks: list[str] = field(default_factory=list)
    # the arrays of the routing policy chosen on validation (routing.policies.tune_routing;
    # the policy itself is in metadata["routing_policy"])
    routing: dict[str, np.ndarray] = field(default_factory=dict)
    # one configuration per member when the members differ (an ensemble of searched trials);
    # empty: every member has `config`
    member_configs: list[TrainConfig] = field(default_factory=list)
    # the space's own encoder (a fine-tuned sentence-transformers folder, model/finetune.py),
    # saved with it as `encoder/`; None: encoder_id names a shared encoder
    encoder_dir: str | None = None
    # the training questions' texts (aligned with question_ids), for the web explorer's map;
    # saved as question_texts.parquet
    question_texts: list[str] = field(default_factory=list)
    # what each LLM answered on the training questions, for finding the LLMs that answer alike
    # (zoo/similar.py): (LLMs, questions) uint8, the label in percent, NOT_ANSWERED where it has
    # none; None where the space keeps none (more than MAX_ANSWER_CELLS, or an older space)
    answers: np.ndarray | None = None

    @property
    def kind(self) -> str:
        return self.config.kind

    @torch.no_grad()
    def member_probs(self, x: np.ndarray | torch.Tensor) -> np.ndarray:
        """(members, n, n_models) probabilities for encoder embeddings x."""
        x = torch.as_tensor(np.asarray(x), dtype=torch.float32)
        return np.stack([torch.sigmoid(_evaluating(mod).score_all(x)).numpy() for mod in self.members])

    def predict_proba(self, x: np.ndarray | torch.Tensor) -> np.ndarray:
        """(n, n_models) probability that each model answers each question correctly."""
        return self.member_probs(x).mean(0)

    @torch.no_grad()
    def question_vectors(self, x: np.ndarray | torch.Tensor, member: int = 0) -> np.ndarray:
        """E_Q of the given member (JE-IRT only): direction = topic, norm = difficulty."""
        mod = self.members[member]
        if not isinstance(mod, JEIRT):
            raise TypeError("question vectors exist for JE-IRT spaces only")
        return _evaluating(mod).question_vectors(torch.as_tensor(np.asarray(x), dtype=torch.float32)).numpy()

    def model_vectors(self, member: int = 0) -> np.ndarray:
        return self.members[member].models.weight.detach().numpy().copy()

    def with_model(self, name: str, vectors: list[np.ndarray], answers: np.ndarray | None = None) -> "CoreSpace":
        """A copy with LLM `name` set to one vector per member (added, or replaced if known);
        `answers`: its row of `self.answers` (percent, NOT_ANSWERED where none), if known."""
        return self.with_models([name], [np.asarray(v)[None] for v in vectors],
                                None if answers is None else np.asarray(answers)[None])

    def with_models(self, names: list[str], vectors: list[np.ndarray], answers: np.ndarray | None = None
                    ) -> "CoreSpace":
        """A copy with the LLMs `names` set to `vectors` (per member, (len(names), d)): added, or
        replaced where known, in one pass (onboarding a thousand LLMs copies the members once)."""
        if len(vectors) != len(self.members):
            raise ValueError(f"need one vector per member ({len(self.members)}), got {len(vectors)}")
        all_names = list(self.model_names)
        index = {n: i for i, n in enumerate(all_names)}
        rows = []
        for name in names:
            if name not in index:
                index[name] = len(all_names)
                all_names.append(name)
            rows.append(index[name])
        members = []
        for mod, vec in zip(self.members, vectors):
            new = copy.deepcopy(mod)
            table = mod.models.weight.detach().clone()
            if len(all_names) > len(table):
                table = torch.cat([table, table.new_zeros(len(all_names) - len(table), table.shape[1])])
            table[rows] = torch.as_tensor(np.asarray(vec), dtype=table.dtype)
            new.models = torch.nn.Embedding.from_pretrained(table, freeze=False)
            members.append(new.eval())
        kept = self.answers
        if kept is not None:
            grown = np.full((len(all_names), kept.shape[1]), NOT_ANSWERED, dtype=np.uint8)
            grown[:len(kept)] = kept
            if answers is not None:
                grown[rows] = answers
            kept = grown
        return dataclasses.replace(self, members=members, model_names=all_names, metadata=copy.deepcopy(self.metadata),
                                   answers=kept)

    def without_models(self, names: list[str]) -> "CoreSpace":
        """A copy without the LLMs `names` (e.g. held out of training: their vectors were never
        fitted). The routing policy's arrays, fitted with every LLM, are not kept."""
        keep = [i for i, n in enumerate(self.model_names) if n not in names]
        members = []
        for mod in self.members:
            new = copy.deepcopy(mod)
            new.models = torch.nn.Embedding.from_pretrained(mod.models.weight.detach()[keep].clone(), freeze=False)
            members.append(new.eval())
        return dataclasses.replace(self, members=members, model_names=[self.model_names[i] for i in keep], routing={},
                                   metadata=copy.deepcopy(self.metadata),
                                   answers=None if self.answers is None else self.answers[keep])

    # ---- persistence ---------------------------------------------------------------------
    def save(self, directory: str | Path) -> Path:
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        tensors = {f"member{i}.{k}": v.detach().contiguous() for i, mod in enumerate(self.members)
                   for k, v in mod.state_dict().items()}
        save_file(tensors, str(d / "weights.safetensors"))
        if self.question_embeddings is not None:
            save_file({"embeddings": torch.as_tensor(np.ascontiguousarray(self.question_embeddings, dtype=np.float32))},
                      str(d / "questions.safetensors"))
        if self.encoder_dir and Path(self.encoder_dir).resolve() != (d / "encoder").resolve():
            shutil.copytree(self.encoder_dir, d / "encoder", dirs_exist_ok=True)
        if self.question_texts:
            import pyarrow as pa
            import pyarrow.parquet as pq
            pq.write_table(pa.table({"text": [str(t) for t in self.question_texts]}), d / "question_texts.parquet")
        if self.answers is not None:
            save_numpy({"answers": np.ascontiguousarray(self.answers, dtype=np.uint8)}, str(d / "answers.safetensors"))
        if self.routing:
            save_numpy({k: np.ascontiguousarray(v) for k, v in self.routing.items()}, str(d / "routing.safetensors"))
        (d / "space.json").write_text(json.dumps({
            "format": "jeirt-space/1", "config": self.config.model_dump(), "encoder_id": self.encoder_id,
            "in_dim": self.in_dim, "n_members": len(self.members), "model_names": self.model_names,
            "member_configs": [c.model_dump() for c in self.member_configs],
            "question_ids": self.question_ids, "question_benchmarks": self.question_benchmarks,
            "metadata": self.metadata}, indent=1))
        return d

    @classmethod
    def load(cls, directory: str | Path) -> "CoreSpace":
        d = Path(directory)
        meta_path = d / "space.json"
        if not meta_path.exists():
            raise FileNotFoundError(f"{meta_path} not found: not a saved JE-IRT space")
        meta = json.loads(meta_path.read_text())
        config = TrainConfig(**meta["config"])
        member_configs = [TrainConfig(**c) for c in meta.get("member_configs", [])]
        tensors = load_file(str(d / "weights.safetensors"))
        members = []
        n_models = len(meta["model_names"])
        for i in range(meta["n_members"]):
            cfg = member_configs[i] if member_configs else config
            mod = build_module(cfg.kind, meta["in_dim"], n_models, **cfg.model_dump(exclude={"kind"}))
            prefix = f"member{i}."
            mod.load_state_dict({k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)})
            members.append(mod.eval())
        questions = d / "questions.safetensors"
        embeddings = load_file(str(questions))["embeddings"].numpy() if questions.exists() else None
        routing = d / "routing.safetensors"
        return cls(members, config, meta["encoder_id"], meta["in_dim"], meta["model_names"],
                   meta.get("question_ids", []), meta.get("metadata", {}), embeddings,
                   meta.get("question_benchmarks", []), load_numpy(str(routing)) if routing.exists() else {},
                   member_configs, str(d / "encoder") if (d / "encoder").is_dir() else None,
                   _read_texts(d / "question_texts.parquet"),
                   load_numpy(str(d / "answers.safetensors"))["answers"] if (d / "answers.safetensors").exists() else None)


def answer_table(n_models: int, n_questions: int, m: np.ndarray, q: np.ndarray, labels: np.ndarray
                 ) -> np.ndarray | None:
    """`CoreSpace.answers` from (LLM, question, label) triples; None past MAX_ANSWER_CELLS."""
    if n_models * n_questions > MAX_ANSWER_CELLS:
        return None
    table = np.full((n_models, n_questions), NOT_ANSWERED, dtype=np.uint8)
    table[np.asarray(m), np.asarray(q)] = np.rint(np.clip(np.asarray(labels, dtype=np.float64), 0, 1) * 100)
    return table


def answers_of(labels: np.ndarray) -> np.ndarray:
    """`CoreSpace.answers` from a questions x LLMs label matrix (NaN where unanswered)."""
    labels = np.asarray(labels, dtype=np.float64).T
    return np.where(np.isnan(labels), NOT_ANSWERED, np.rint(np.clip(np.nan_to_num(labels), 0, 1) * 100)).astype(np.uint8)


def _read_texts(path: Path) -> list[str]:
    if not path.exists():
        return []
    import pyarrow.parquet as pq
    return pq.read_table(path).column("text").to_pylist()


def _evaluating(module: torch.nn.Module) -> torch.nn.Module:
    """The module in eval mode; switched only when it is not (eval() walks every submodule: a
    third of a routed query's time when called on each)."""
    return module.eval() if module.training else module
