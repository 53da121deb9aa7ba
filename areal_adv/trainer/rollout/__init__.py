"""Where the training data comes from: tasks, episodes, reward functions, prompt data.

Holds the task interface and the built-in tasks (`tasks`), the multi-turn episode
loop and its export as trajectory groups (`episodes`), TRL-style reward functions
(`reward_functions`), prompt datasets and prompt sources (`prompt_data`) and the
extra batch fields advantage stages read (`stage_fields`). It may import
`areal_adv.trainer.ppo` (for the fields stages declare), `areal_adv.trainer.parallel`,
`areal_adv.trainer.lm`, `areal_adv.api` and `areal_adv.utils`, never `areal_adv.trainer.run`.
"""
