"""What lets an engine stop and go on later without losing work (issues 47 and 49): a step rolled out and
scored but not trained yet is kept in the run's output directory when its engine stops for parking, and the
engine started next takes it up instead of rolling the step out again. Pure Python; imports training's types
only (never torch, Django or judging)."""
