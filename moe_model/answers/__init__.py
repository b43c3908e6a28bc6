"""Answers: what the pages and commands ask of the model: a curve over budgets, Explore's view, the
recommender and what would fit, the policy comparison, known problems, speeds over several streams."""
