int middle() { return 1; }
