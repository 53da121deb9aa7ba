"""verl warns at import about every optional training engine it cannot find (megatron, ...)."""

import warnings

warnings.filterwarnings("ignore", message=r".* engine is not available", category=UserWarning)
warnings.filterwarnings("ignore", message=r"Ray state API is no longer experimental", category=DeprecationWarning)
