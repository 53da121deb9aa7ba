"""A two-player game for role-conditioned advantages (RAE): the policy plays either seat of Nim."""
