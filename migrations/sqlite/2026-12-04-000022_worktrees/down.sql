DROP TABLE worktrees;
