"""Analysis of embedding snapshots (closeness, KNN match, similarity): reads arrays or run dirs."""
