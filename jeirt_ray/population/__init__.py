"""A population of thousands of LLMs (the Open LLM Leaderboard's): their own table, and the
studies that JE-IRT's premise is for at that size: predicting held-out answers, a new LLM's
accuracy from few answers, the leaderboard's scores from 100 answers, and routing in pools of
10 to 1,000 LLMs. `benchmarks/population.py` runs them all."""
