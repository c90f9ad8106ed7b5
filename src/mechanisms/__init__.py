"""Built-in mechanisms (w-event, personalized w-event, Swellfish), written against budgetcheck's public API only."""

from __future__ import annotations

from collections.abc import Callable

from mechanisms.adapub import AdaPub as AdaPub
from mechanisms.ba import BA as BA
from mechanisms.bd import BD as BD
from mechanisms.dsat import DSATw as DSATw
from mechanisms.fast import FASTw as FASTw
from mechanisms.fast import FASTwAsPublished as FASTwAsPublished
from mechanisms.hybrid import Hybrid as Hybrid
from mechanisms.local import LBA as LBA
from mechanisms.local import LBD as LBD
from mechanisms.local import LBU as LBU
from mechanisms.local import LPA as LPA
from mechanisms.local import LPD as LPD
from mechanisms.local import LSP as LSP
from mechanisms.local import PLBU as PLBU
from mechanisms.panprivate import BAPanPrivate as BAPanPrivate
from mechanisms.panprivate import BAPanPrivateAnnounced as BAPanPrivateAnnounced
from mechanisms.panprivate import BDPanPrivate as BDPanPrivate
from mechanisms.panprivate import BDPanPrivateAnnounced as BDPanPrivateAnnounced
from mechanisms.partitioned import BAPartitioned as BAPartitioned
from mechanisms.partitioned import BDPartitioned as BDPartitioned
from mechanisms.pegasus import PeGaSus as PeGaSus
from mechanisms.pegasus_hierarchical import PeGaSusHierarchical as PeGaSusHierarchical
from mechanisms.personalized import PBA as PBA
from mechanisms.personalized import PBD as PBD
from mechanisms.personalized import StrictestBA as StrictestBA
from mechanisms.personalized import StrictestBD as StrictestBD
from mechanisms.rescuedp import RescueDP as RescueDP
from mechanisms.rescuedp import RescueDPAsPublished as RescueDPAsPublished
from mechanisms.sample import Sample as Sample
from mechanisms.shifted import BAShifted as BAShifted
from mechanisms.shifted import BDShifted as BDShifted
from mechanisms.swellfish import TSBA as TSBA
from mechanisms.swellfish import TSBD as TSBD
from mechanisms.swellfish import TINARSample as TINARSample
from mechanisms.swellfish import TINARUniform as TINARUniform
from mechanisms.swellfish import TSSample as TSSample
from mechanisms.swellfish import TSUniform as TSUniform
from mechanisms.swellfish import Unicorn as Unicorn
from mechanisms.swellfish import UnicornIS as UnicornIS
from mechanisms.swellfish import UnicornPS as UnicornPS
from mechanisms.uniform import Uniform as Uniform

BUILTIN: dict[str, Callable[[], object]] = {
    "Uniform": Uniform,
    "Sample": Sample,
    "BD": BD,
    "BA": BA,
    "BDShifted": BDShifted,
    "BAShifted": BAShifted,
    "BDPartitioned": BDPartitioned,
    "BAPartitioned": BAPartitioned,
    "BDPanPrivate": BDPanPrivate,
    "BAPanPrivate": BAPanPrivate,
    "BDPanPrivateAnnounced": BDPanPrivateAnnounced,
    "BAPanPrivateAnnounced": BAPanPrivateAnnounced,
    "Hybrid": Hybrid,
    "FASTw": FASTw,
    "DSATw": DSATw,
    "RescueDP": RescueDP,
    "AdaPub": AdaPub,
    "PeGaSus": PeGaSus,
    "PeGaSusHierarchical": PeGaSusHierarchical,
    "PBD": PBD,
    "PBA": PBA,
    "StrictestBD": StrictestBD,
    "StrictestBA": StrictestBA,
    "PLBU": PLBU,
    "LBU": LBU,
    "LSP": LSP,
    "LBD": LBD,
    "LBA": LBA,
    "LPD": LPD,
    "LPA": LPA,
    "TSUniform": TSUniform,
    "TSSample": TSSample,
    "TSBD": TSBD,
    "TSBA": TSBA,
    "TINARUniform": TINARUniform,
    "TINARSample": TINARSample,
    "UnicornIS": UnicornIS,
    "UnicornPS": UnicornPS,
    "Unicorn": Unicorn,
}

__all__ = [
    "BA",
    "BAPanPrivate",
    "BAPanPrivateAnnounced",
    "BAPartitioned",
    "BAShifted",
    "BD",
    "BDPanPrivate",
    "BDPanPrivateAnnounced",
    "BDPartitioned",
    "BDShifted",
    "BUILTIN",
    "AdaPub",
    "DSATw",
    "FASTw",
    "FASTwAsPublished",
    "Hybrid",
    "LBA",
    "LBD",
    "LBU",
    "LPA",
    "LPD",
    "LSP",
    "PLBU",
    "PeGaSus",
    "PeGaSusHierarchical",
    "RescueDP",
    "RescueDPAsPublished",
    "PBA",
    "PBD",
    "Sample",
    "StrictestBA",
    "StrictestBD",
    "TINARSample",
    "TINARUniform",
    "TSBA",
    "TSBD",
    "TSSample",
    "TSUniform",
    "Unicorn",
    "UnicornIS",
    "UnicornPS",
    "Uniform",
]
