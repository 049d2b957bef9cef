-- Folding cannot be undone: the other spellings named the same repository.
SELECT 1;
