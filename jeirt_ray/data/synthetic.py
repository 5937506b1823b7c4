"""A small SYNTHETIC response dataset drawn from a known JE-IRT geometry.

Questions are real-looking text in several topics, subtopics and difficulty levels; simulated
LLMs have different specialities. The true question vectors and model vectors are kept in
`data.extra` so tests can check that training recovers them. This is the project's embedded
default (the real datasets cannot be shipped); it is labelled synthetic wherever it is shown.
"""

from __future__ import annotations

import numpy as np

from .dataset import ResponseData

TOPICS: dict[str, dict[str, list[str]]] = {
    "arithmetic": {
        "addition": ["What is {a} plus {b}?", "Add {a} and {b}. What is the sum?"],
        "multiplication": ["What is {a} times {b}?", "Multiply {a} by {b}. What is the product?"],
        "fractions": ["Simplify the fraction {a}/{b}.", "What is {a}/{b} written as a decimal?"],
    },
    "geography": {
        "capitals": ["Which city is the capital of the country ranked {a} by area?",
                     "Name the capital city of the nation with {a} million people."],
        "rivers": ["Which river flows through the valley at latitude {a} degrees?",
                   "How long is the river whose source lies at {a} metres of altitude?"],
        "climate": ["What climate zone has an average rainfall of {a} millimetres?",
                    "Which biome has a mean temperature of {b} degrees?"],
    },
    "chemistry": {
        "elements": ["Which element has atomic number {a}?", "How many protons does element {a} have?"],
        "reactions": ["Balance the reaction that yields {a} moles of water.",
                      "What is the product when {a} grams of sodium react with chlorine?"],
        "acids": ["What is the pH of a solution with {a} millimolar hydrochloric acid?",
                  "Is a solution with pH {b} an acid or a base?"],
    },
    "programming": {
        "python": ["What does the Python expression len(range({a})) return?",
                   "In Python, what is the value of {a} // {b}?"],
        "algorithms": ["What is the time complexity of sorting {a} items with merge sort?",
                       "How many comparisons does binary search need for {a} elements?"],
        "sql": ["Write a SQL query that selects the top {a} rows by salary.",
                "What does a SQL join of tables with {a} and {b} rows return at most?"],
    },
    "history": {
        "ancient": ["Which empire ruled the Mediterranean in the year {a} BC?",
                    "Who built the monument finished in {a} BC?"],
        "modern": ["Which treaty was signed in the year 1{a}?", "What war ended in the year 1{b}?"],
        "economic": ["What caused the market crash of the year 1{a}?",
                     "Which currency reform happened in the year 1{b}?"],
    },
    "literature": {
        "poetry": ["Which poet wrote the sonnet numbered {a}?", "How many lines does a poem of {a} stanzas have?"],
        "novels": ["Who wrote the novel published in the year 1{a}?",
                   "Which character narrates chapter {a} of the novel?"],
        "drama": ["Which play has {a} acts and a tragic ending?", "Who speaks the monologue in scene {a}?"],
    },
}
LEVELS = ["Easy question:", "Intermediate question:", "Hard question:", "Expert-level question:"]
LEVEL_NORMS = np.array([0.5, 1.5, 2.5, 3.5])


def generate(n_models: int = 24, n_questions: int = 1200, dim: int = 8, observed: float = 0.85,
             seed: int = 0) -> ResponseData:
    """Draw a synthetic dataset. Each question's true vector is set by its topic, subtopic and
    level (all visible in its text); each model is a general ability plus one or two specialities."""
    rng = np.random.default_rng(seed)
    topics = list(TOPICS)
    topic_dirs = rng.normal(size=(len(topics), dim))
    topic_dirs /= np.linalg.norm(topic_dirs, axis=1, keepdims=True)
    sub_dirs = rng.normal(size=(len(topics), 3, dim)) * 0.35

    qids, bench, texts, vecs = [], [], [], []
    for i in range(n_questions):
        t = int(rng.integers(len(topics)))
        subs = list(TOPICS[topics[t]])
        s = int(rng.integers(len(subs)))
        level = int(rng.integers(len(LEVELS)))
        template = TOPICS[topics[t]][subs[s]][int(rng.integers(2))]
        text = f"{LEVELS[level]} {template.format(a=int(rng.integers(2, 999)), b=int(rng.integers(2, 99)))}"
        direction = topic_dirs[t] + sub_dirs[t, s]
        direction /= np.linalg.norm(direction)
        qids.append(f"synthetic:{i}")
        bench.append(topics[t])
        texts.append(text)
        vecs.append(direction * LEVEL_NORMS[level])
    q_true = np.array(vecs)

    # Models: a general skill along the mean direction plus strong skill in one or two topics.
    general = topic_dirs.mean(0)
    general /= np.linalg.norm(general)
    m_true = np.empty((n_models, dim))
    for m in range(n_models):
        v = general * rng.uniform(0.5, 3.0)
        for t in rng.choice(len(topics), size=int(rng.integers(1, 3)), replace=False):
            v = v + topic_dirs[t] * rng.uniform(1.0, 3.5)
        m_true[m] = v
    names = np.array([f"synthetic-llm-{m:02d}" for m in range(n_models)])

    u = q_true / np.linalg.norm(q_true, axis=1, keepdims=True)
    p_true = 1.0 / (1.0 + np.exp(-(u @ m_true.T - np.linalg.norm(q_true, axis=1, keepdims=True))))
    obs = rng.random(p_true.shape) < observed
    q_idx, m_idx = np.nonzero(obs)
    labels = (rng.random(len(q_idx)) < p_true[q_idx, m_idx]).astype(np.float32)
    return ResponseData(np.array(qids), np.array(bench), np.array(texts), names,
                        q_idx.astype(np.int64), m_idx.astype(np.int64), labels,
                        name="synthetic", synthetic=True,
                        extra={"q_true": q_true, "m_true": m_true, "p_true": p_true})


def sparse_scale(n_models: int, n_questions: int, *, n_benchmarks: int = 50, benchmarks_per_model: int = 3,
                 in_dim: int = 384, true_dim: int = 16, seed: int = 0):
    """A large SYNTHETIC sparse dataset for scale tests, as arrays (no text, no ResponseData).

    Questions are split evenly into benchmarks; each LLM is evaluated on `benchmarks_per_model`
    random benchmarks (all of their questions), as leaderboards do, so the observed pairs grow
    with n_models x questions per benchmark, not with n_models x n_questions. Labels come from
    a random JE-IRT geometry of `true_dim` dimensions; `X` stands in for the frozen encoder
    embeddings (a random linear image of the true question vectors plus noise).
    Returns X (Q, in_dim) float32, q, m (int64) and y (float32) over the observed pairs."""
    rng = np.random.default_rng(seed)
    bench = np.arange(n_questions) % n_benchmarks
    centres = rng.normal(size=(n_benchmarks, true_dim))
    e_true = centres[bench] + 0.7 * rng.normal(size=(n_questions, true_dim))
    e_true *= rng.uniform(0.3, 2.0, size=(n_questions, 1)) / np.linalg.norm(e_true, axis=1, keepdims=True)
    models = rng.normal(scale=1.5, size=(n_models, true_dim))
    X = (e_true @ rng.normal(size=(true_dim, in_dim)) + 0.3 * rng.normal(size=(n_questions, in_dim))).astype(np.float32)
    by_bench = [np.flatnonzero(bench == b) for b in range(n_benchmarks)]
    q_parts, m_parts = [], []
    for m in range(n_models):
        for b in rng.choice(n_benchmarks, size=benchmarks_per_model, replace=False):
            q_parts.append(by_bench[b])
            m_parts.append(np.full(len(by_bench[b]), m))
    q = np.concatenate(q_parts)
    m = np.concatenate(m_parts)
    y = np.empty(len(q), dtype=np.float32)
    norms = np.linalg.norm(e_true, axis=1)
    u = e_true / norms[:, None]
    for i in range(0, len(q), 1 << 22):  # in chunks: bounded memory at tens of millions of pairs
        s = slice(i, i + (1 << 22))
        logit = np.einsum("ij,ij->i", u[q[s]], models[m[s]]) - norms[q[s]]
        y[s] = rng.random(len(logit)) < 1 / (1 + np.exp(-logit))
    return X, q, m, y
